"""The judge pipeline over real HTTP: a loopback server records what the client sends."""

import json

import pytest

from radmatch_audit import Evaluator, JudgeConfig, PairInput
from radmatch_audit.judges.base import EndpointRefusedError
from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
from radmatch_audit.core.schemas import SERVER_LIMITS
from radmatch_audit.testing.fake_server import StubServer

REFERENCE = (
    "INDICATION: Shortness of breath.\nFINDINGS: Small left pleural effusion. No pneumothorax. "
    "Heart size is normal. A 12 mm nodule in the right upper lobe."
)
CANDIDATES = [
    "FINDINGS: Small left pleural effusion. No pneumothorax. Heart size is normal.",
    "FINDINGS: Large left pleural effusion. No pneumothorax.",
    "FINDINGS: Heart size is normal. A 12 mm nodule in the right upper lobe.",
    "FINDINGS: No acute cardiopulmonary abnormality.",
]


def make_evaluator(server, tmp_path, *, retries=3, timeout_s=30.0, cache=True, api_key=None,
                   backend="vllm", concurrency=4, **options):
    judge = OpenAICompatibleJudge(
        base_url=server.base_url, model="stub-judge", api_key=api_key, backend=backend, timeout_s=timeout_s
    )
    return Evaluator(
        judge,
        concurrency=concurrency,
        cache_dir=tmp_path / "cache" if cache else None,
        limits=SERVER_LIMITS,
        max_tokens={"extract": 2048, "match": 1024, "grade": 1024, "adjudicate": 512},
        retries=retries,
        backoff_s=0.01,
        **options,
    )


def run_once(server, tmp_path, pairs_, **kwargs):
    with make_evaluator(server, tmp_path, **kwargs) as evaluator:
        return evaluator.evaluate(pairs_)


def pairs(n=4):
    return [PairInput(reference=REFERENCE, candidate=c, pair_id=f"c{i}", study_id="s1") for i, c in enumerate(CANDIDATES[:n])]


def stage_of(body):
    return body["structured_outputs"]["json"]["title"]


def test_requests_carry_schema_temperature_budget_and_a_static_prefix(tmp_path):
    with StubServer() as server:
        records = run_once(server, tmp_path, pairs())
        bodies = server.chat_requests()
    assert all(r.error is None and r.scores is not None for r in records)
    stages = {}
    for body in bodies:
        schema = body["structured_outputs"]["json"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert body["temperature"] == 0
        assert body["max_tokens"] in (2048, 1024, 512)
        assert body["model"] == "stub-judge"
        stages.setdefault(stage_of(body), []).append(body["messages"])
    assert set(stages) == {"ExtractionAnswer", "MatchingAnswer", "GradingAnswer", "AdjudicationAnswer"}
    for stage, calls in stages.items():
        prefixes = {json.dumps(messages[:-1]) for messages in calls}
        assert len(prefixes) == 1, f"{stage}: the static prefix differs between calls"
        assert calls[0][0]["role"] == "system" and len(calls[0]) >= 3  # instructions + exemplars
    extract_inputs = [json.loads(m[-1]["content"]) for m in stages["ExtractionAnswer"]]
    assert all(x["indication"] == "Shortness of breath." for x in extract_inputs)  # read by code


def test_shared_reference_is_extracted_once_and_a_rerun_sends_nothing(tmp_path):
    with StubServer() as server:
        first = run_once(server, tmp_path, pairs())
        cold = len(server.chat_requests())
        second = run_once(server, tmp_path, pairs())
        assert len(server.chat_requests()) == cold  # no request at all on the rerun
    extracts = [b for b in server.chat_requests() if stage_of(b) == "ExtractionAnswer"]
    assert len(extracts) == 1 + len(CANDIDATES)  # the shared reference once
    # per pair: its extraction, matching, grading (the last candidate matches nothing: no
    # grading) and adjudication, and a quarter of the shared reference's extraction
    adjudications = sum(stage_of(b) == "AdjudicationAnswer" for b in server.chat_requests())
    assert adjudications == sum(any(u.outcome != "COR" for u in r.scores.units) for r in first)
    assert cold == 1 + 4 + 4 + 3 + adjudications and cold / len(CANDIDATES) <= 4.25
    assert [r.scores for r in first] == [r.scores for r in second]
    assert all(r.usage.cached and r.usage.judge_calls == 0 for r in second)
    assert sum(r.usage.judge_calls for r in first) == cold


def test_records_carry_timings_usage_prompt_versions_and_no_key(tmp_path, monkeypatch):
    monkeypatch.setenv("RADMATCH_API_KEY", "sk-very-secret-value")
    with StubServer(api_key="sk-very-secret-value") as server:
        config = JudgeConfig.from_env(base_url=server.base_url, model="stub-judge", cache_dir=str(tmp_path))
        with Evaluator.from_config(config) as evaluator:
            (record,) = evaluator.evaluate(pairs(1))
        assert {r["authorization"] for r in server.requests} == {"Bearer sk-very-secret-value"}
    assert record.error is None
    timings = record.timings_s
    assert min(timings.extract, timings.match, timings.grade) > 0
    # the two extractions run side by side and `extract` is their sum (docs/records.md), so
    # the pair's wall time covers at least half of it, then matching and grading in turn
    assert timings.total >= timings.extract / 2 + timings.match + timings.grade - 0.001  # rounding
    assert record.usage.prompt_tokens > 0 and record.usage.completion_tokens > 0
    assert record.judge.backend == "vllm" and record.judge.model == "stub-judge"
    assert set(record.judge.prompt_version) == {"extract", "match", "grade", "adjudicate"}
    assert all(v.startswith("v1-") for v in record.judge.prompt_version.values())
    assert record.judge.exemplars_used["extract"] >= 1
    assert "sk-very-secret-value" not in record.to_json()
    assert str(tmp_path) not in record.to_json()


def test_transient_server_error_is_retried(tmp_path):
    with StubServer(faults=["500", "503"]) as server:
        (record,) = run_once(server, tmp_path, pairs(1), cache=False)
    assert record.error is None and record.scores is not None


def test_persistent_failure_marks_the_pair_failed_never_clean(tmp_path):
    with StubServer(faults=["500"] * 20) as server:
        (record,) = run_once(server, tmp_path, pairs(1), retries=2, cache=False)
    assert record.scores is None
    assert record.failure.stage == "extract" and record.failure.attempts == 2
    assert record.error.startswith("extract: HTTP 500 from the judge server")
    assert "after 2 attempt(s)" in record.error


def test_invalid_json_answer_is_retried_once_then_fails(tmp_path):
    one_call = [PairInput(reference=REFERENCE, candidate="")]  # only the reference is extracted
    with StubServer(faults=["garbage", "garbage"]) as server:
        (record,) = run_once(server, tmp_path, one_call, cache=False)
    assert record.scores is None and "answer is not valid JSON" in record.error
    with StubServer(faults=["garbage"]) as server:
        (record,) = run_once(server, tmp_path, one_call, cache=False, adjudication=False)
    assert record.error is None and len(server.chat_requests()) == 2


def test_grading_answer_of_the_wrong_length_is_retried_once(tmp_path):
    # calls in order: extract x2, match, grade
    with StubServer(faults=["ok", "ok", "ok", "short"]) as server:
        (record,) = run_once(server, tmp_path, [PairInput(reference=REFERENCE, candidate=CANDIDATES[0])],
                             cache=False, retries=1)
    assert record.error is None
    with StubServer(faults=["ok", "ok", "ok", "short", "short"]) as server:
        (record,) = run_once(server, tmp_path, [PairInput(reference=REFERENCE, candidate=CANDIDATES[0])],
                             cache=False, retries=1)
    assert record.scores is None
    assert record.error.startswith("grade: the grade answer has no entry for row(s) ")
    assert record.stages.matching is not None  # the stages that finished are kept


def test_per_call_timeout_fails_the_pair_and_says_so(tmp_path):
    with StubServer(faults=["sleep:3"]) as server:
        (record,) = run_once(server, tmp_path, pairs(1), cache=False, retries=1, timeout_s=0.5)
    assert record.scores is None
    assert record.error.startswith("extract: no answer from the judge server within 0.5 s")
    assert record.failure.attempts == 1 and record.failure.elapsed_s >= 0.5


def test_wrong_api_key_fails_with_a_clear_message(tmp_path):
    with StubServer(api_key="right") as server:
        (record,) = run_once(server, tmp_path, pairs(1), api_key="wrong", cache=False)
    assert record.scores is None and "API key was refused" in record.error


def test_hosted_backend_sends_response_format_json_schema(tmp_path):
    with StubServer() as server:
        (record,) = run_once(server, tmp_path, pairs(1), backend="hosted", cache=False)
        body = server.chat_requests()[0]
    assert record.error is None
    assert body["response_format"]["type"] == "json_schema"
    assert "structured_outputs" not in body


def test_report_text_is_refused_for_a_public_endpoint_without_opt_in():
    with pytest.raises(EndpointRefusedError, match="not a loopback or private-network address"):
        JudgeConfig.from_env(base_url="https://93.184.216.34/v1").build_judge()
    with pytest.raises(EndpointRefusedError):
        JudgeConfig.from_env(base_url="https://8.8.8.8/v1", backend="hosted").build_judge()
    judge = JudgeConfig.from_env(base_url="https://8.8.8.8/v1", allow_remote_endpoint=True).build_judge()
    assert judge.base_url == "https://8.8.8.8/v1"  # built; nothing was sent
    assert JudgeConfig.from_env(base_url="http://10.1.2.3:8000/v1").build_judge().model == "radmatch-judge"


def test_empty_candidate_costs_no_extraction_and_scores_all_missed(tmp_path):
    with StubServer() as server:
        (record,) = run_once(server, tmp_path, [PairInput(reference=REFERENCE, candidate="   ")], cache=False)
        titles = [stage_of(b) for b in server.chat_requests()]
    assert titles.count("ExtractionAnswer") == 1 and "MatchingAnswer" not in titles
    assert record.scores.outcomes["mis"] == len(record.stages.reference_findings)
    assert "matching: no judge call, one side has no findings" in record.flags


def test_bad_pair_input_names_the_pair_before_any_call(tmp_path):
    with StubServer() as server, make_evaluator(server, tmp_path) as evaluator:
        good = PairInput(reference=REFERENCE, candidate=CANDIDATES[0], pair_id="x6")
        with pytest.raises(ValueError, match="pair x7: candidate must be a string"):
            evaluator.evaluate([good, PairInput(reference="a", candidate=None, pair_id="x7")])
        with pytest.raises(ValueError, match="pair x6: pair_id occurs more than once"):
            evaluator.evaluate([good, good])
        assert server.chat_requests() == []


def test_an_empty_reference_is_bad_input_and_an_empty_candidate_is_scored(tmp_path):
    with StubServer() as server:
        empty_ref, empty_cand = run_once(server, tmp_path, [
            PairInput(reference=" \n ", candidate=CANDIDATES[0]),
            PairInput(reference=REFERENCE, candidate=""),
        ], cache=False)
    assert empty_ref.scores is None and empty_ref.failure.stage == "input"
    assert empty_ref.error == "input: the reference report is empty"
    assert empty_cand.error is None and empty_cand.scores.actionable_errors >= 1


# ---------------------------------------------------------------------- one evaluator, many runs


def test_one_evaluator_runs_twice_against_a_keep_alive_server(tmp_path):
    """The README reuses an evaluator; its HTTP client must live on one loop across calls."""
    # no answer kept in memory either, so the second run talks to the server again
    with StubServer() as server, make_evaluator(server, tmp_path, cache=False, memo_entries=0) as evaluator:
        first = evaluator.evaluate(pairs())
        sent_first = len(server.chat_requests())
        second = evaluator.evaluate(pairs())
        sent_second = len(server.chat_requests()) - sent_first
    assert all(r.error is None and r.scores is not None for r in first + second)
    assert sent_first > 0 and sent_second == sent_first
    assert [r.scores for r in first] == [r.scores for r in second]


def test_an_evaluator_works_inside_a_running_event_loop(tmp_path):
    import asyncio

    async def notebook_cell(evaluator):
        blocking = evaluator.evaluate(pairs(1))  # a notebook calls the blocking form too
        awaited = await evaluator.aevaluate(pairs(1))
        return blocking + awaited

    with StubServer() as server, make_evaluator(server, tmp_path) as evaluator:
        records = asyncio.run(notebook_cell(evaluator))
    assert all(r.scores is not None for r in records)


def test_request_bodies_are_what_outlines_and_the_openai_sdk_send(tmp_path):
    """The lean client sends exactly the body Outlines' from_vllm / from_openai would."""
    import asyncio

    import openai
    import outlines
    from outlines.inputs import Chat

    from radmatch_audit.core.schemas import answer_models

    schema = answer_models(SERVER_LIMITS).extract
    messages = [{"role": "system", "content": "Extract."}, {"role": "user", "content": '{"report": "x"}'}]
    for backend, factory in (("vllm", outlines.from_vllm), ("hosted", outlines.from_openai)):
        with StubServer() as server:
            judge = OpenAICompatibleJudge(base_url=server.base_url, model="stub-judge", backend=backend,
                                          thinking=False, temperature=0.0)

            async def both():
                await judge.generate(messages, schema, max_tokens=64)
                await judge.aclose()
                client = openai.AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
                kwargs = {"max_tokens": 64, "temperature": 0.0,
                          "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
                await factory(client, "stub-judge")(Chat(messages), schema, **kwargs)
                await client.close()

            asyncio.run(both())
            ours, reference = server.chat_requests()
        assert ours == reference, backend


def test_the_encoded_body_is_json_dumps_of_the_request_byte_for_byte():
    """Encoding the static prefix once per stage must not change one byte of any request."""
    import json

    from radmatch_audit.stages import build_messages
    from radmatch_audit.core.schemas import answer_models

    models = answer_models(SERVER_LIMITS)
    judge = OpenAICompatibleJudge(base_url="http://127.0.0.1:9/v1", model="m", thinking=True)
    for stage, modality, exemplars, user in (
        ("extract", "chest_xray", None, {"report": "Épanchement — 3 mm « nodule »", "indication": None}),
        ("extract", "chest_xray", 1, {"report": "No change.", "indication": "cough"}),
        ("extract", "chest_xray", None, {"report": "Second pair.", "indication": None}),
        ("match", "head_ct", 0, {"gt_findings": [], "pred_findings": []}),
        ("grade", "brain_mri", None, {"pairs": []}),
    ):
        messages = build_messages(stage, modality, user, exemplars)
        schema = models.for_stage(stage, 1)
        for max_tokens in (64, 4096):
            expected = json.dumps(judge.request_body(messages, schema, max_tokens), ensure_ascii=False)
            assert judge.encode_body(messages, schema, max_tokens) == expected.encode("utf-8")


# ---------------------------------------------------------------------- faults


def test_a_truncated_200_body_is_retried_and_fails_no_other_pair(tmp_path):
    # the first call (the shared reference's extraction) gets a body cut mid-way: all four
    # pairs share it
    for fault in ("truncated", "truncated_json"):
        with StubServer(faults=[fault]) as server:
            records = run_once(server, tmp_path, pairs(), cache=False)
        assert all(r.error is None and r.scores is not None for r in records), fault


def tries_of_the_first_call(server):
    """The request that drew the injected fault and its retry (the pair's other extraction
    is sent beside it, so either may arrive first)."""
    log = server.requests
    faulted = next(r for r in log if r["fault"] not in (None, "ok"))
    return [r for r in log if r["body"] == faulted["body"]][:2]


def test_retry_after_is_honoured(tmp_path):
    with StubServer(faults=["429:1.5"]) as server:
        (record,) = run_once(server, tmp_path, pairs(1), cache=False)
        first, second = tries_of_the_first_call(server)
    assert record.error is None
    assert second["arrived"] - first["arrived"] >= 1.4  # the backoff alone would be 0.01 s


def test_retry_after_is_capped(tmp_path):
    with StubServer(faults=["429:600"]) as server:
        (record,) = run_once(server, tmp_path, pairs(1), cache=False, max_wait_s=0.3)
        first, second = tries_of_the_first_call(server)
        gap = second["arrived"] - first["arrived"]
    assert record.error is None and gap < 5


def test_a_reset_connection_and_an_invalid_answer_are_retried(tmp_path):
    with StubServer(faults=["reset", "invalid"]) as server:
        (record,) = run_once(server, tmp_path, pairs(1), cache=False)
    assert record.error is None


def test_proxy_variables_never_see_report_text(tmp_path, monkeypatch):
    with StubServer() as proxy, StubServer() as server:
        host_port = proxy.base_url.removeprefix("http://").removesuffix("/v1")
        for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(var, f"http://{host_port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        (record,) = run_once(server, tmp_path, pairs(1), cache=False)
        assert record.error is None and server.chat_requests()
        assert proxy.requests == []


def test_preflight_names_the_fix(tmp_path):
    from radmatch_audit.judges.base import JudgeUnavailable

    with StubServer() as server:
        judge = OpenAICompatibleJudge(base_url=server.base_url, model="other-model")
        with Evaluator(judge) as evaluator, pytest.raises(JudgeUnavailable, match="serves \\['stub-judge'\\]"):
            evaluator.check()
        url = server.base_url
    with Evaluator(OpenAICompatibleJudge(base_url=url, model="stub-judge")) as evaluator:
        with pytest.raises(JudgeUnavailable, match="cannot reach the judge server"):
            evaluator.check()  # the server is gone
    with pytest.raises(ValueError, match="empty port"):
        OpenAICompatibleJudge(base_url="http://127.0.0.1:/v1", model="m")


def test_streaming_bounds_the_calls_at_the_judge_and_the_pairs_held(tmp_path):
    from radmatch_audit.run.pipeline import PAIRS_PER_SLOT, READ_AHEAD_PER_SLOT

    n = 40
    with StubServer(latency_s=0.02) as server, \
            make_evaluator(server, tmp_path, cache=False, concurrency=2) as evaluator:
        pulled = []

        def source():
            for i in range(n):
                pulled.append(evaluator.stats.pairs)
                yield PairInput(reference=f"{REFERENCE} Study {i}.", candidate=CANDIDATES[i % 4], pair_id=str(i))

        done = []
        stats = evaluator.run(source(), on_record=done.append)
        spans = [(r["arrived"], r["finished"]) for r in server.requests if r["path"].endswith("/chat/completions")]
    assert stats.pairs == n and len(done) == n and all(r.scores is not None for r in done)
    # never more than `concurrency` calls at the server at once
    peak = max(sum(a <= t < f for a, f in spans) for t, _ in spans)
    assert peak <= 2
    # memory stays flat: pair i is read only when at most concurrency x PAIRS_PER_SLOT
    # pairs are open and concurrency x READ_AHEAD_PER_SLOT more are read ahead
    window, ahead = 2 * PAIRS_PER_SLOT, 2 * READ_AHEAD_PER_SLOT
    held = [i - finished for i, finished in enumerate(pulled)]
    assert max(held) <= window + ahead and held[n // 2] >= ahead  # the read-ahead is used, and bounded
    # the records come about oldest first: a freed slot goes to the oldest pair's call, so
    # a pair is overtaken only by the few opened beside it (newest-first would move the
    # pairs of a whole window, `window` places); how far depends on which answers come back
    # first, so the bound is loose
    order = [int(r.pair_id) for r in done]
    assert max(abs(place - pair) for place, pair in enumerate(order)) <= ahead + 2


# ---------------------------------------------------------------------- several servers


def test_calls_spread_over_two_servers_and_survive_losing_one_midway(tmp_path):
    import subprocess
    import sys

    from radmatch_audit.judges.pool import JudgePool

    killed = subprocess.Popen([sys.executable, "-m", "radmatch_audit.testing.fake_server", "--port", "0",
                               "--latency", "0.05"], stdout=subprocess.PIPE, text=True)
    try:
        first_url = killed.stdout.readline().strip()
        many = [PairInput(reference=REFERENCE.replace("12 mm", f"{n} mm"), candidate=c, pair_id=f"{n}-{i}")
                for n in range(10, 16) for i, c in enumerate(CANDIDATES)]
        with StubServer(latency_s=0.05) as second:
            config = JudgeConfig.from_env({}, base_url=f"{first_url},{second.base_url}", model="stub-judge",
                                          cache=False, concurrency=4)
            done = []

            def on_record(record):
                done.append(record)
                if len(done) == 6:
                    killed.kill()  # one workstation goes away mid-run

            with Evaluator.from_config(config) as evaluator:
                assert isinstance(evaluator.judge, JudgePool)
                evaluator.check()
                evaluator.run(many, on_record=on_record)
                drained = evaluator.judge._drained_until
            served_by_second = len(second.chat_requests())
    finally:
        killed.kill()
    assert len(done) == len(many) and all(r.scores is not None for r in done)
    assert drained[0] > 0 and drained[1] == 0  # the lost server was drained, the other never
    assert served_by_second > 0


def test_a_pool_whose_servers_are_all_down_stops_at_the_preflight():
    from radmatch_audit.judges.base import JudgeUnavailable

    config = JudgeConfig.from_env({}, base_url="http://127.0.0.1:9/v1, http://127.0.0.1:7/v1")
    with Evaluator.from_config(config) as evaluator, pytest.raises(JudgeUnavailable, match="no judge server answers"):
        evaluator.check()


def test_thinking_on_and_off_are_cached_apart(tmp_path):
    with StubServer() as server:
        for thinking in (True, False, True):
            judge = OpenAICompatibleJudge(base_url=server.base_url, model="stub-judge", thinking=thinking)
            with Evaluator(judge, cache_dir=tmp_path / "cache", limits=SERVER_LIMITS) as evaluator:
                (record,) = evaluator.evaluate(pairs(1))
            assert record.error is None
        sent = [b["chat_template_kwargs"]["enable_thinking"] for b in server.chat_requests()]
    assert sent.count(True) == sent.count(False) > 0  # the third run was answered from the cache


# ------------------------------------------------ a server that quotes the request


def repeats_report_text(text: str, reports: list[str], window: int = 12) -> list[str]:
    """The stretches of `window` characters of any report that `text` holds."""
    return [r[i:i + window] for r in reports for i in range(len(r) - window + 1) if r[i:i + window] in text]


@pytest.mark.parametrize("fault", ["echo", "echo:500"])
def test_a_server_error_that_quotes_the_request_never_reaches_a_record(tmp_path, fault):
    with StubServer(faults=[fault] * 20) as server:
        records = run_once(server, tmp_path, pairs(2), cache=False, retries=1)
        quoted = [r for r in server.requests if r["status"] in (400, 500)]
    assert quoted  # the server did quote report text back
    for record in records:
        assert record.error and f"HTTP {fault.partition(':')[2] or 400}" in record.error
        assert "left out" in record.error
        assert not repeats_report_text(record.error, [REFERENCE, *CANDIDATES]), record.error


def test_a_server_error_that_quotes_nothing_sent_is_shown(tmp_path):
    with StubServer(faults=["400"]) as server:
        (record,) = run_once(server, tmp_path, pairs(1), cache=False)
    assert record.error and "HTTP 400 from the judge server: injected 400" in record.error


def test_an_echo_is_caught_through_escapes_and_a_server_s_own_words_are_kept():
    from radmatch_audit.judges.faults import ECHOED
    from radmatch_audit.judges.faults import shown as _shown

    sent = json.dumps({"report": "FINDINGS:\nSmall left pleural effusion.\tNo pneumothorax."})
    for quoted in (json.dumps(sent), sent.upper(), "body: small  LEFT pleural\\neffusion", sent[-20:]):
        assert _shown(f"bad request {quoted}", sent) == ECHOED, quoted
    context = ("This model's maximum context length is 8192 tokens. However, you requested "
               "9000 tokens (8000 in the messages, 1000 in the completion).")
    assert _shown(context, sent) == context
    assert _shown("bad request: 'No effusion.'", json.dumps({"report": "No effusion."})) == ECHOED
