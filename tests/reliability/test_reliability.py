"""Issue 12, "Nothing lost, nothing leaked, nothing hung", against the loopback fake server.

Every test runs `radmatch-audit evaluate` (a subprocess) or the Python API against the real
fake OpenAI-compatible server of radmatch_audit.testing.fake_server on 127.0.0.1:

* a fault soak: 1,000 pairs through every injected fault kind; one record per pair,
  failures that say what happened, and no scored pair resting on a call that never
  succeeded (checked against the server's own request log);
* SIGKILL in mid-run, then --resume: one record per pair, the scores of an
  uninterrupted run; a torn last line is dropped;
* files and secrets: records and answer-cache files owner-only, the API key nowhere,
  report text never in log output; bad input and a judge that cannot serve stop or fail
  cleanly, without touching an existing output file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

from radmatch_audit import Evaluator, JudgeConfig, PairInput, read_records
from radmatch_audit.stages import finding_view
from radmatch_audit.core.records import Record
from radmatch_audit.scoring.results import as_dict
from radmatch_audit.stages import rows_to_grade
from radmatch_audit.testing.fake_server import StubServer, messages_digest
from radmatch_audit.testing.reports import INDICATIONS, SENTENCES
from radmatch_audit.core.vocabulary import STAGES

# ---------------------------------------------------------------------- shared helpers

SECRET = "sk-radmatch-test-7f3c9a1e5b2d4c6f8a0b"
MARKER = "Zebra-striped quokka artefact overlies the left apex."  # never to reach a log
TITLES = {"extract": "ExtractionAnswer", "match": "MatchingAnswer", "grade": "GradingAnswer"}
# every fault the fake server injects at random, plus hangs past the client's timeout
ALL_FAULT_KINDS = ("500", "503", "429", "reset", "truncated", "truncated_json", "invalid",
                   "garbage", "hang")
# what a failure's cause must name: an HTTP status, the connection, a timeout, a bad answer
CAUSE = re.compile(
    r"HTTP (429|500|503) from the judge server"
    r"|the connection to the judge server failed"
    r"|no answer from the judge server within"
    r"|HTTP 200 answer was cut off"
    r"|answer is not valid JSON|answer does not fit its schema"
    r"|does not have one error list per matched row"
)


def synthetic_pairs(n_refs: int, n_cands: int = 4, *, marker: Optional[str] = None) -> list[dict]:
    """`n_refs` references x `n_cands` candidates from SENTENCES; unique pair_ids.

    Three references in four have an INDICATION header (read by code, sent to every stage);
    each candidate shares some sentences with its reference and has one of its own.
    `marker`, when given, is a sentence put into every reference.
    """
    rows = []
    n = len(SENTENCES)
    for r in range(n_refs):
        body = " ".join(SENTENCES[(r * 3 + k) % n] for k in range(5))
        if marker:
            body += " " + marker
        header = f"INDICATION: {INDICATIONS[r % len(INDICATIONS)]}\n" if r % 4 else ""
        reference = f"{header}FINDINGS: {body} Reported for study {r}."
        for c in range(n_cands):
            shared = " ".join(SENTENCES[(r * 3 + c + k) % n] for k in range(3))
            candidate = f"FINDINGS: {shared} Drafted by system {c} for study {r}."
            rows.append({"pair_id": f"r{r}-c{c}", "study_id": f"s{r}",
                         "reference": reference, "candidate": candidate})
    return rows


def write_jsonl(path: Path, rows: Iterable[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def cli_command(src: Path, out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(src), "-o", str(out), "-q", "--json",
            *args]


def cli_env(base_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADMATCH_")}
    return {**env, "RADMATCH_BASE_URL": base_url, "RADMATCH_MODEL": "stub-judge", **extra}


def run_cli(base_url: str, src: Path, out: Path, *args: str, timeout: float = 120,
            env: Optional[dict[str, str]] = None) -> tuple[subprocess.CompletedProcess, float]:
    """Run `radmatch-audit evaluate`; the finished process and its wall time in seconds."""
    started = time.perf_counter()
    proc = subprocess.run(cli_command(src, out, *args), check=False, capture_output=True,
                          text=True, timeout=timeout, env=env or cli_env(base_url))
    return proc, time.perf_counter() - started


def records_of(path: Path) -> list[Record]:
    return list(read_records(path))


def one_per_pair(records: list[Record], pair_ids: Iterable[str]) -> dict[str, Record]:
    """The records by pair_id, after asserting there is exactly one per input pair."""
    counts = Counter(r.pair_id for r in records)
    repeated = {pair_id: n for pair_id, n in counts.items() if n > 1}
    assert not repeated, f"pairs with more than one record: {repeated}"
    assert set(counts) == set(pair_ids), (
        f"missing: {sorted(set(pair_ids) - set(counts))[:10]}, "
        f"unexpected: {sorted(set(counts) - set(pair_ids))[:10]}")
    return {r.pair_id: r for r in records}


def scores_by_pair(records: dict[str, Record]) -> dict[str, Any]:
    return {pid: as_dict(r.scores) if r.scores else None for pid, r in records.items()}


def records_of_lenient(path: Path) -> list[Record]:
    """The complete records of a file an interrupted run left (a torn last line skipped)."""
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1].decode("utf-8")
    return [Record.model_validate_json(line) for line in complete.splitlines() if line.strip()]


def evaluate_in_process(server: StubServer, pairs: list[PairInput], *, retries: int,
                        **config: Any) -> list[Record]:
    """The Python API as a user calls it, with quick retries (backoff 0.01 s)."""
    config = JudgeConfig.from_env(env={}, base_url=server.base_url, model="stub-judge", cache=False,
                                  timeout_s=5.0, **config)
    with Evaluator(config.build_judge(), concurrency=4, retries=retries, backoff_s=0.01) as evaluator:
        return evaluator.evaluate(pairs)


def marker_pairs(n: int = 4) -> list[PairInput]:
    return [PairInput(reference=row["reference"], candidate=row["candidate"], pair_id=row["pair_id"])
            for row in synthetic_pairs(n, 1, marker=MARKER)]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def free_port() -> socket.socket:
    """A socket bound to a loopback port and not listening: connecting to it is refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def call_key(title: str, user_input: Any) -> tuple[str, str]:
    """A judge call as (stage schema title, canonical JSON of the pair's own user message).

    The rest of a request (the stage's static prefix, schema, max_tokens) is the same
    for every call of one stage, so this names the exact call.
    """
    return title, json.dumps(user_input, sort_keys=True)


def logged_key(body: dict[str, Any]) -> tuple[str, str]:
    title = body["structured_outputs"]["json"]["title"]
    return call_key(title, json.loads(body["messages"][-1]["content"]))


def needed_calls(record: Record) -> list[tuple[str, str]]:
    """Every judge call a scored record's stored stages rest on, rebuilt from the record.

    extract: each non-empty report with the indication found; match: both finding lists
    as the match stage shows them, when both are non-empty; grade: the rows of the
    repaired matching (generic rows left out), when there are any.
    """
    stages = record.stages
    indication = stages.indication
    calls = []
    for report in (record.reference, record.candidate):
        if report.strip():
            calls.append(call_key(TITLES["extract"], {"report": report, "indication": indication}))
    reference, candidate = stages.reference_findings or [], stages.candidate_findings or []
    if reference and candidate:
        calls.append(call_key(TITLES["match"], {
            "indication": indication,
            "gt_findings": [finding_view(f) for f in reference],
            "pred_findings": [finding_view(f) for f in candidate],
        }))
    rows = rows_to_grade(stages.matching, reference, candidate)
    if rows:
        findings = {f.id: f for f in reference + candidate}
        calls.append(call_key(TITLES["grade"], {
            "indication": indication,
            "pairs": [{"pred_finding": finding_view(findings[p]), "gt_finding": finding_view(findings[g])}
                      for p, g in rows],
        }))
    return calls


# ---------------------------------------------------------------------- 1. fault soak


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


# ---------------------------------------------------------------------- 2. SIGKILL, then --resume


def test_sigkill_mid_run_then_resume_matches_an_uninterrupted_run(tmp_path):
    rows = synthetic_pairs(15, 4)  # 60 pairs
    pair_ids = [row["pair_id"] for row in rows]
    src = write_jsonl(tmp_path / "pairs.jsonl", rows)
    whole, killed = tmp_path / "whole.jsonl", tmp_path / "killed.jsonl"
    with StubServer(latency_s=0.05) as server:
        proc, _ = run_cli(server.base_url, src, whole, "--no-cache", "--concurrency", "4")
        assert proc.returncode == 0, proc.stderr

        run = subprocess.Popen(cli_command(src, killed, "--no-cache", "--concurrency", "2"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=cli_env(server.base_url))
        try:
            deadline = time.monotonic() + 120
            while line_count(killed) < len(rows) // 2 and run.poll() is None:
                assert time.monotonic() < deadline, "the run wrote too few records in 120 s"
                time.sleep(0.01)
            os.kill(run.pid, signal.SIGKILL)
        finally:
            run.wait(timeout=30)
        assert run.returncode == -signal.SIGKILL, "the run ended before it could be killed"
        written_before = line_count(killed)
        assert len(rows) // 2 <= written_before < len(rows)
        done_before = {r.pair_id for r in records_of_lenient(killed)}

        sent = len(server.chat_requests())
        proc, _ = run_cli(server.base_url, src, killed, "--no-cache", "--concurrency", "4", "--resume")
        resumed_bodies = server.chat_requests()[sent:]
    assert proc.returncode == 0, proc.stderr
    assert "resuming:" in proc.stderr

    expected = scores_by_pair(one_per_pair(records_of(whole), pair_ids))
    final = one_per_pair(records_of(killed), pair_ids)
    assert scores_by_pair(final) == expected
    assert json.loads(proc.stdout)["n_pairs"] == len(rows)
    # the resumed run asked nothing about a candidate whose record it kept
    extracted = {json.loads(b["messages"][-1]["content"])["report"] for b in resumed_bodies
                 if b["structured_outputs"]["json"]["title"] == TITLES["extract"]}
    kept_candidates = {final[pid].candidate for pid in done_before}
    assert not extracted & kept_candidates


def test_resume_drops_a_torn_last_line(tmp_path):
    rows = synthetic_pairs(5, 4)  # 20 pairs
    pair_ids = [row["pair_id"] for row in rows]
    src = write_jsonl(tmp_path / "pairs.jsonl", rows)
    whole, torn = tmp_path / "whole.jsonl", tmp_path / "torn.jsonl"
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, whole, "--no-cache")
        assert proc.returncode == 0, proc.stderr
        lines = whole.read_bytes().splitlines(keepends=True)
        torn_id = json.loads(lines[8])["pair_id"]
        torn.write_bytes(b"".join(lines[:8]) + lines[8][: len(lines[8]) // 2])  # no newline
        proc, _ = run_cli(server.base_url, src, torn, "--no-cache", "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "resuming: 8 pair(s)" in proc.stderr
    final = one_per_pair(records_of(torn), pair_ids)  # every line parses: the torn one is gone
    assert final[torn_id].scores is not None
    assert scores_by_pair(final) == scores_by_pair(one_per_pair(records_of(whole), pair_ids))
    assert torn.read_bytes().endswith(b"\n")


# ---------------------------------------------------------------------- 3. files and secrets


def test_records_and_cache_files_are_owner_only_and_the_key_is_nowhere(tmp_path):
    rows = synthetic_pairs(3, 2)
    src, out, cache = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl", tmp_path / "cache"
    # a few faults, so that error paths (messages, retries) run too; 5 attempts outlast them
    with StubServer(api_key=SECRET, faults=["500", "reset", "429:0.1", "garbage"]) as server:
        proc, _ = run_cli(server.base_url, src, out, "--cache-dir", str(cache), "--retries", "5",
                          env=cli_env(server.base_url, RADMATCH_API_KEY=SECRET))
        authorizations = {entry["authorization"] for entry in server.requests}
    assert proc.returncode == 0, proc.stderr
    assert authorizations == {f"Bearer {SECRET}"}  # the key was sent, to the server only

    assert mode_of(out) == 0o600
    cache_files = [p for p in cache.rglob("*") if p.is_file()]
    assert cache_files
    for path in cache_files:
        assert mode_of(path) == 0o600, path
    for folder in (p for p in cache.rglob("*") if p.is_dir()):
        assert mode_of(folder) == 0o700, folder

    assert SECRET not in out.read_text(encoding="utf-8")
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    for path in cache_files:
        assert SECRET.encode() not in path.read_bytes(), path


def test_an_existing_records_file_is_made_owner_only(tmp_path):
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(1, 2))
    out = tmp_path / "records.jsonl"
    out.write_text("")
    out.chmod(0o644)
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
        assert proc.returncode == 0, proc.stderr
        assert mode_of(out) == 0o600
        out.chmod(0o644)
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--resume")
    assert proc.returncode == 0, proc.stderr
    assert mode_of(out) == 0o600


def test_debug_log_output_never_holds_the_api_key(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("RADMATCH_KEY_FOR_TEST", SECRET)
    caplog.set_level(logging.DEBUG)
    faults = ["500", "reset", "truncated", "garbage", "429:0.05", "503"]
    with StubServer(api_key=SECRET, faults=faults) as server:
        records = evaluate_in_process(server, marker_pairs(), retries=8,
                                      api_key_env="RADMATCH_KEY_FOR_TEST")
        authorizations = {entry["authorization"] for entry in server.requests}
    assert authorizations == {f"Bearer {SECRET}"}
    assert all(not r.failed for r in records)
    assert any(rec.levelno == logging.DEBUG for rec in caplog.records)  # DEBUG was captured
    assert any("retry" in rec.getMessage() for rec in caplog.records)  # the faults were logged
    text = caplog.text + "\n".join(rec.getMessage() for rec in caplog.records)
    assert SECRET not in text
    assert SECRET not in "".join(r.to_json() for r in records)


def test_warning_log_output_never_holds_report_text_when_pairs_fail(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    with StubServer(fault_rate=1.0, fault_kinds=("500", "garbage", "invalid", "truncated_json"),
                    retry_after=0.01) as server:
        records = evaluate_in_process(server, marker_pairs(), retries=2)
    assert all(r.failed for r in records)
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(warnings) >= len(records)  # each failed pair was logged ...
    text = caplog.text + "\n".join(rec.getMessage() for rec in warnings)
    for record in records:
        assert record.pair_id in text
    for fragment in (MARKER, "Zebra", "quokka", "Reported for study", "Drafted by system"):
        assert fragment not in text  # ... without its report text


def test_cli_stderr_never_holds_report_text_when_pairs_fail(tmp_path):
    rows = synthetic_pairs(2, 2, marker=MARKER)
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer(fault_rate=1.0, fault_kinds=("500", "garbage")) as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--retries", "1")
    assert proc.returncode == 1
    assert "failed" in proc.stderr
    assert "quokka" not in proc.stderr and "quokka" not in proc.stdout
    assert all(r.failed and "quokka" in r.reference for r in records_of(out))  # kept in the file


def test_a_repeated_pair_id_is_refused_and_the_output_is_untouched(tmp_path):
    rows = synthetic_pairs(2, 2)
    rows.append({**rows[1], "candidate": "FINDINGS: Lungs are clear."})  # pair_id of row 2 again
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    before = b'{"pair_id": "old", "note": "an earlier run"}\n'
    out.write_bytes(before)
    mtime = os.stat(out).st_mtime_ns
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
        assert server.requests == []
    assert proc.returncode == 2
    assert f"pair_id {rows[1]['pair_id']!r} of line 5 already appears at line 2" in proc.stderr
    assert out.read_bytes() == before and os.stat(out).st_mtime_ns == mtime


def test_bad_utf8_line_becomes_a_failed_record_and_the_others_are_scored(tmp_path):
    rows = synthetic_pairs(1, 3)
    lines = [json.dumps(row).encode() for row in rows]
    lines.insert(1, b'{"pair_id": "bad-bytes", "reference": "FINDINGS: \xff\xfe effusion.", '
                    b'"candidate": "FINDINGS: Lungs are clear."}')
    src, out = tmp_path / "pairs.jsonl", tmp_path / "records.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
    assert proc.returncode == 1, proc.stderr
    records = one_per_pair(records_of(out), [row["pair_id"] for row in rows] + ["bad-bytes"])
    bad = records["bad-bytes"]
    assert bad.failure.stage == "input" and bad.scores is None
    assert "line 2" in bad.failure.cause and "UTF-8" in bad.failure.cause
    assert bad.candidate == "FINDINGS: Lungs are clear."  # its readable values are kept
    assert all(records[row["pair_id"]].scores is not None for row in rows)
    out.read_bytes().decode("utf-8")  # the records file itself is valid UTF-8
    summary = json.loads(proc.stdout)
    assert (summary["n_pairs"], summary["n_scored"], summary["n_failed"]) == (4, 3, 1)


def test_an_empty_reference_is_an_input_failure(tmp_path):
    rows = synthetic_pairs(1, 2)
    rows.append({"pair_id": "empty", "reference": "", "candidate": "FINDINGS: Lungs are clear."})
    rows.append({"pair_id": "blank", "reference": " \n ", "candidate": "FINDINGS: Lungs are clear."})
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
        reports = {json.loads(b["messages"][-1]["content"]).get("report") for b in server.chat_requests()}
    assert proc.returncode == 1, proc.stderr
    records = one_per_pair(records_of(out), [row["pair_id"] for row in rows])
    for pid in ("empty", "blank"):
        assert records[pid].failure.stage == "input" and records[pid].scores is None
        assert "reference" in records[pid].failure.cause
    assert "" not in reports and " \n " not in reports  # no judge call for them
    assert records["r0-c0"].scores is not None and records["r0-c1"].scores is not None


def test_csv_without_a_reference_column_fails_before_any_request(tmp_path):
    src, out = tmp_path / "pairs.csv", tmp_path / "records.jsonl"
    src.write_text("pair_id,report,candidate\na,FINDINGS: Lungs are clear.,FINDINGS: Lungs are clear.\n")
    with StubServer() as server:
        proc, wall_s = run_cli(server.base_url, src, out, "--no-cache")
        assert server.requests == []
    assert proc.returncode == 2
    assert "no column 'reference'" in proc.stderr and "--reference-column" in proc.stderr
    assert not out.exists()
    assert wall_s < 60


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


def test_a_server_error_quoting_the_request_reaches_neither_the_screen_nor_a_record(tmp_path):
    """A judge server (or a gateway) whose error message quotes the request."""
    rows = synthetic_pairs(1, 2, marker=MARKER)
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer(fault_rate=1.0, fault_kinds=("echo",)) as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--retries", "1")
        assert any(r.get("status") == 400 for r in server.requests)
    assert proc.returncode == 1
    assert "quokka" not in proc.stderr and "quokka" not in proc.stdout
    records = records_of(out)
    assert records and all(r.failed and "left out" in r.error for r in records)
    for line in out.read_text().splitlines():  # the report's own fields hold it, nothing else
        record = json.loads(line)
        for field in ("reference", "candidate", "indication"):
            record.pop(field, None)
        assert "quokka" not in json.dumps(record)
