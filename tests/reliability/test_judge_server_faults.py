"""A judge server that fails, redirects, serves another model or a small context, or
answers badly, against the loopback fake server (radmatch_audit.testing.fake_server):
one record per pair, failures that say what happened, and no scored pair resting on a
call that never succeeded.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
from reliability_helpers import (
    ALL_FAULT_KINDS,
    CAUSE,
    MAX_TOKENS,
    TITLES,
    evaluator,
    free_port,
    logged_key,
    needed_calls,
    one_per_pair,
    pair_inputs,
    records_of,
    run_cli,
    synthetic_pairs,
    write_jsonl,
)

from radmatch_audit import PairInput
from radmatch_audit.core.vocabulary import STAGES
from radmatch_audit.judges.base import JudgeUnavailable
from radmatch_audit.testing.fake_server import StubServer, messages_digest


def test_fault_soak_loses_nothing_and_scores_nothing_unanswered(tmp_path):
    """1,000 pairs (250 references x 4 candidates) through `radmatch-audit evaluate`, 32 in
    flight, 2 s timeout, 3 attempts, against a server that faults 10 % of attempts with
    every kind it has (500, 503, 429 with Retry-After 0.2, reset, truncated body, cut
    JSON, schema-invalid answer, garbage, a hang of 2.5 s) and fails 1 % of request
    bodies on every attempt.

    "No scored pair depended on a call that never succeeded" is checked against the
    server's log. A call is named by its stage and its user message (`call_key`; the
    rest of the body is fixed per stage). A call succeeded when at least one of its
    attempts was answered 200 with fault "ok" (a 200 that was cut off, invalid,
    garbage, or came after the client's timeout does not count). For every scored
    record, `needed_calls` rebuilds the calls its stored stages rest on from the record
    itself (the reports, the indication, the findings, the repaired matching); each
    must be a call that succeeded. A client that scored a pair from a failed call (an
    empty answer in place of an error, say) would need a call the log shows only
    faults for, or one the server never saw. The sound direction only: a 200 "ok" the
    client gave up on still counts as a success here, which can hide a bug, never
    invent one.

    About 40 s on 2 cores (so not marked slow); the CLI's wall time is printed (-s).
    """
    rows = synthetic_pairs(250, 4)
    pair_ids = [row["pair_id"] for row in rows]
    assert len(set(pair_ids)) == 1000
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer(fault_rate=0.1, seed=12, fault_kinds=ALL_FAULT_KINDS, always_fail_rate=0.01,
                    retry_after=0.2, hang_s=2.5) as server:
        proc, wall_s = run_cli(server.base_url, src, out, "--concurrency", "32", "--no-cache",
                               "--timeout", "2", "--retries", "3", timeout=600)
        log = [entry for entry in server.requests if isinstance(entry.get("body"), dict)]
    print(f"\nfault soak: 1000 pairs, {len(log)} chat requests, exit {proc.returncode}, "
          f"{wall_s:.1f} s wall")

    assert proc.returncode == 1, proc.stderr[-3000:]  # some pairs failed, the rest were processed
    records = one_per_pair(records_of(out), pair_ids)
    failed = {pid: r for pid, r in records.items() if r.failed}
    scored = {pid: r for pid, r in records.items() if not r.failed}
    assert failed and scored

    # every fault kind was served, and some bodies were refused on every attempt
    faults = Counter(entry["fault"] for entry in log)
    assert set(ALL_FAULT_KINDS) | {"ok", "always_fail"} <= set(faults), faults

    for pid, record in failed.items():
        failure = record.failure
        assert record.scores is None and failure is not None, pid
        assert failure.stage in STAGES, (pid, failure)
        assert CAUSE.search(failure.cause), (pid, failure.cause)
        assert failure.attempts >= 2, (pid, failure)  # every fault kind here is retried
        assert record.error == failure.message()
    for pid, record in scored.items():
        assert record.scores is not None and record.failure is None, pid

    # the server's view: which calls ever got a good answer, which never did
    attempts: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for entry in log:
        attempts[logged_key(entry["body"])].append(entry)
    succeeded = {key for key, tries in attempts.items()
                 if any(t["fault"] == "ok" and t.get("status") == 200 for t in tries)}
    never = set(attempts) - succeeded
    always_failed = {messages_digest(e["body"]) for e in log if e["fault"] == "always_fail"}
    assert always_failed and never
    for key in (k for k, tries in attempts.items()
                if messages_digest(tries[0]["body"]) in always_failed):
        assert key in never  # the server kept its word: an always-fail body never got a 200

    for pid, record in scored.items():
        for key in needed_calls(record):
            assert key in succeeded, (
                f"{pid} is scored but its {key[0]} call "
                + ("only ever got faults" if key in never else "never reached the server"))

    # the pairs that needed an extract call that never succeeded all failed
    for key in never:
        title, user = key[0], json.loads(key[1])
        if title == TITLES["extract"]:
            dependants = [pid for pid, r in records.items() if user["report"] in (r.reference, r.candidate)
                          and r.stages.indication == user["indication"]]
            assert all(records[pid].failed for pid in dependants), (key, dependants)

    summary = json.loads(proc.stdout)
    assert summary["n_pairs"] == 1000
    assert summary["n_failed"] == len(failed) and summary["n_scored"] == len(scored)
    assert set(summary["failed_pairs"]) == set(failed)
    assert f"{len(failed)} pair(s) failed" in proc.stderr


def test_a_server_that_is_down_stops_the_run_before_any_record(tmp_path):
    src, out = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(2, 2)), tmp_path / "records.jsonl"
    with free_port() as sock:
        port = sock.getsockname()[1]
        proc, wall_s = run_cli(f"http://127.0.0.1:{port}/v1", src, out, "--no-cache")
    assert proc.returncode == 2
    assert "cannot reach the judge server" in proc.stderr and "--base-url" in proc.stderr
    assert not out.exists()
    assert wall_s < 60  # at once: no retries, no per-pair timeouts


def test_a_wrong_model_stops_the_run_and_leaves_an_existing_output_untouched(tmp_path):
    src, out = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(2, 2)), tmp_path / "records.jsonl"
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--model", "no-such-model")
        assert server.chat_requests() == []
    assert proc.returncode == 2
    assert "not 'no-such-model'" in proc.stderr and "--model" in proc.stderr
    assert not out.exists()

    before = b'{"pair_id": "old"}\n'
    out.write_bytes(before)
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--model", "no-such-model")
    assert proc.returncode == 2 and out.read_bytes() == before


def test_a_redirect_is_never_followed_and_names_its_location(tmp_path):
    """Item 1: a 307 to another loopback server fails the pair (no retry) naming the
    Location; the other server never sees the report text. The pre-flight too."""
    with StubServer() as elsewhere:
        target = elsewhere.base_url + "/chat/completions"
        with StubServer(fault_rate=1.0, fault_kinds=(f"redirect:{target}",)) as server:
            with evaluator(server, tmp_path) as ev:
                records = ev.evaluate(pair_inputs(1, 1))
            assert records[0].failed and records[0].scores is None
            assert "HTTP 307" in records[0].error and target in records[0].error
            assert records[0].failure.attempts == 1  # not retried
        with StubServer(redirect=elsewhere.base_url + "/models") as server:
            with evaluator(server, tmp_path) as ev, pytest.raises(JudgeUnavailable, match="307"):
                ev.check()
        assert elsewhere.requests == []


def test_the_loaded_model_and_context_are_recorded_and_key_the_cache(tmp_path):
    """Item 5: vLLM's `root` and `max_model_len` reach record.judge and the cache key: a
    second server of the same served name with other weights gets its own calls."""
    with StubServer(root="org/model-a", max_model_len=65536) as a, evaluator(a, tmp_path) as ev:
        ev.check()
        first = ev.evaluate(pair_inputs(1, 1))
    assert first[0].judge.loaded_model == "org/model-a" and first[0].judge.max_model_len == 65536
    assert first[0].scores is not None
    with StubServer(root="org/model-b", max_model_len=65536) as b:
        with evaluator(b, tmp_path) as ev:  # the same answer cache
            ev.check()
            second = ev.evaluate(pair_inputs(1, 1))
        assert len(b.chat_requests()) > 0  # not answered from model a's cache entries
    assert second[0].judge.loaded_model == "org/model-b"
    assert second[0].usage.cached is False


def test_an_answer_from_another_model_fails_its_pair_with_the_reason(tmp_path):
    with StubServer(root="org/model-a", fault_rate=1.0, fault_kinds=("answer_model:org/model-z",)) as server:
        with evaluator(server, tmp_path, cache="none") as ev:
            ev.check()
            record = ev.evaluate(pair_inputs(1, 1))[0]
    assert record.scores is None and "org/model-z" in record.error and "org/model-a" in record.error


def test_a_small_served_context_fails_with_its_reason_never_a_server_4xx(tmp_path):
    """Issue 26 5c: max_model_len 4096 is read by the pre-flight; a call that cannot fit
    fails with the context reason before it is sent."""
    long_report = "FINDINGS: " + " ".join(f"A {i} mm nodule in segment {i}." for i in range(400))
    pair = PairInput(reference=long_report, candidate="FINDINGS: Clear lungs.", pair_id="long")
    with StubServer(max_model_len=4096) as server:
        with evaluator(server, tmp_path) as ev:
            ev.check()
            record = ev.evaluate([pair])[0]
        statuses = [r.get("status") for r in server.requests if r["path"].endswith("/chat/completions")]
    assert record.scores is None and "context of 4096" in record.error, record.error
    assert 400 not in statuses and statuses == []


def test_exemplars_are_dropped_to_fit_the_served_context(tmp_path):
    """Issue 26 5c: a context that holds the instructions but not every exemplar: the
    record says how many were sent; the server never answers 400."""
    from radmatch_audit.judges.base import estimate_tokens
    from radmatch_audit.stages import build_messages, stage_prompt

    user = {"report": "FINDINGS: " + "Small left pleural effusion. " * 20, "indication": None}
    bare_messages = build_messages("extract", "chest_xray", user, 0)
    with StubServer(max_model_len=10**6) as server, evaluator(server, tmp_path) as ev:
        ev.check()  # the estimate learns the server's characters per token (POST /tokenize)
        measured = ev.judge.count_tokens(bare_messages)
        assert server.requests[-1]["path"] == "/tokenize"
    assert measured < estimate_tokens(bare_messages)  # nearer the server's count
    bare = measured + MAX_TOKENS["extract"]
    available = stage_prompt("extract", "chest_xray").exemplars
    assert available > 0
    pair = PairInput(reference=user["report"], candidate="FINDINGS: Clear lungs.", pair_id="p")
    with StubServer(max_model_len=bare + 50) as server:
        with evaluator(server, tmp_path) as ev:
            ev.check()
            record = ev.evaluate([pair])[0]
        statuses = {r.get("status") for r in server.requests if r["path"].endswith("/chat/completions")}
    assert record.judge.max_model_len == bare + 50
    assert record.judge.exemplars_used["extract"] < available
    assert 400 not in statuses


def test_a_non_finite_measurement_is_an_invalid_answer_retried_then_failed(tmp_path):
    with StubServer(fault_rate=1.0, fault_kinds=("nonfinite",)) as server:
        with evaluator(server, tmp_path, cache="none") as ev:
            record = ev.evaluate(pair_inputs(1, 1))[0]
    assert record.scores is None and record.failure.stage == "extract"
    assert "finite" in record.error and record.failure.attempts == 2


def test_a_malformed_usage_block_is_unknown_and_fails_nothing(tmp_path):
    with StubServer(fault_rate=1.0, fault_kinds=("bad_usage",)) as server:
        with evaluator(server, tmp_path, cache="none") as ev:
            records = ev.evaluate(pair_inputs(1, 2))
    assert all(r.scores is not None for r in records), [r.error for r in records]
    assert all(r.usage.completion_tokens == 0 for r in records)
    assert all(r.usage.unreported_calls == r.usage.judge_calls > 0 for r in records)
