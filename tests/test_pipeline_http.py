"""The judge pipeline over real HTTP: a loopback server records what the client sends."""

import json

import pytest

from openai_stub import StubServer
from radmatch import Evaluator, JudgeConfig, PairInput
from radmatch.decoding import SERVER_LIMITS
from radmatch.judges.base import EndpointRefusedError
from radmatch.judges.openai_compat import OpenAICompatibleJudge

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


def make_evaluator(server, tmp_path, *, retries=3, timeout_s=30.0, cache=True, api_key=None, backend="vllm"):
    judge = OpenAICompatibleJudge(
        base_url=server.base_url, model="stub-judge", api_key=api_key, backend=backend, timeout_s=timeout_s
    )
    return Evaluator(
        judge,
        concurrency=4,
        cache_dir=tmp_path / "cache" if cache else None,
        limits=SERVER_LIMITS,
        max_tokens={"indication": 256, "extract": 2048, "match": 1024, "grade": 1024},
        retries=retries,
        timeout_s=timeout_s,
        backoff_s=0.01,
    )


def pairs(n=4):
    return [PairInput(reference=REFERENCE, candidate=c, pair_id=f"c{i}", study_id="s1") for i, c in enumerate(CANDIDATES[:n])]


def stage_of(body):
    return body["structured_outputs"]["json"]["title"]


def test_requests_carry_schema_temperature_budget_and_a_static_prefix(tmp_path):
    with StubServer() as server:
        records = make_evaluator(server, tmp_path).evaluate(pairs())
        bodies = server.chat_requests()
    assert all(r.error is None and r.scores is not None for r in records)
    stages = {}
    for body in bodies:
        schema = body["structured_outputs"]["json"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert body["temperature"] == 0
        assert body["max_tokens"] in (256, 2048, 1024)
        assert body["model"] == "stub-judge"
        stages.setdefault(stage_of(body), []).append(body["messages"])
    assert set(stages) == {"IndicationAnswer", "ExtractionAnswer", "MatchingAnswer", "GradingAnswer"}
    for stage, calls in stages.items():
        prefixes = {json.dumps(messages[:-1]) for messages in calls}
        assert len(prefixes) == 1, f"{stage}: the static prefix differs between calls"
        assert calls[0][0]["role"] == "system" and len(calls[0]) >= 3  # instructions + exemplars
    extract_inputs = [json.loads(m[-1]["content"]) for m in stages["ExtractionAnswer"]]
    assert all(x["indication"] == "Shortness of breath." for x in extract_inputs)


def test_shared_reference_is_extracted_once_and_a_rerun_sends_nothing(tmp_path):
    with StubServer() as server:
        first = make_evaluator(server, tmp_path).evaluate(pairs())
        cold = len(server.chat_requests())
        second = make_evaluator(server, tmp_path).evaluate(pairs())
        assert len(server.chat_requests()) == cold  # no request at all on the rerun
    extracts = [b for b in server.chat_requests() if stage_of(b) == "ExtractionAnswer"]
    assert len(extracts) == 1 + len(CANDIDATES)  # the shared reference once
    assert cold / len(CANDIDATES) <= 3.25 + 0.25  # + the shared indication call
    assert [r.scores for r in first] == [r.scores for r in second]
    assert all(r.usage["cached"] and r.usage["judge_calls"] == 0 for r in second)
    assert sum(r.usage["judge_calls"] for r in first) == cold


def test_records_carry_timings_usage_prompt_versions_and_no_key(tmp_path, monkeypatch):
    monkeypatch.setenv("RADMATCH_API_KEY", "sk-very-secret-value")
    with StubServer(api_key="sk-very-secret-value") as server:
        config = JudgeConfig.from_env(base_url=server.base_url, model="stub-judge", cache_dir=str(tmp_path))
        (record,) = Evaluator.from_config(config).evaluate(pairs(1))
        assert server.requests[0]["authorization"] == "Bearer sk-very-secret-value"
    assert record.error is None
    assert set(record.timings_s) >= {"indication", "extract", "match", "grade", "total"}
    assert record.usage["prompt_tokens"] > 0 and record.usage["completion_tokens"] > 0
    assert record.judge["backend"] == "vllm" and record.judge["model"] == "stub-judge"
    assert all(v.startswith("v1-") for v in record.judge["prompt_version"].values())
    assert record.judge["exemplars_used"]["extract"] >= 1
    assert "sk-very-secret-value" not in record.to_json()
    assert str(tmp_path) not in record.to_json()


def test_transient_server_error_is_retried(tmp_path):
    with StubServer(faults=["500", "503"]) as server:
        (record,) = make_evaluator(server, tmp_path, cache=False).evaluate(pairs(1))
    assert record.error is None and record.scores is not None


def test_persistent_failure_marks_the_pair_failed_never_clean(tmp_path):
    with StubServer(faults=["500"] * 20) as server:
        (record,) = make_evaluator(server, tmp_path, retries=2, cache=False).evaluate(pairs(1))
    assert record.scores is None
    assert record.error.startswith("indication: gave up after 2 attempts")


def test_invalid_json_answer_is_retried_once_then_fails(tmp_path):
    with StubServer(faults=["garbage", "garbage"]) as server:
        (record,) = make_evaluator(server, tmp_path, cache=False).evaluate(pairs(1))
    assert record.scores is None and "answer is not valid JSON" in record.error
    with StubServer(faults=["garbage"]) as server:
        (record,) = make_evaluator(server, tmp_path, cache=False).evaluate(pairs(1))
    assert record.error is None


def test_grading_answer_of_the_wrong_length_is_retried_once(tmp_path):
    # calls in order: indication, extract x2, match, grade
    with StubServer(faults=["ok", "ok", "ok", "ok", "short"]) as server:
        (record,) = make_evaluator(server, tmp_path, cache=False, retries=1).evaluate(
            [PairInput(reference=REFERENCE, candidate=CANDIDATES[0])]
        )
    assert record.error is None
    with StubServer(faults=["ok", "ok", "ok", "ok", "short", "short"]) as server:
        (record,) = make_evaluator(server, tmp_path, cache=False, retries=1).evaluate(
            [PairInput(reference=REFERENCE, candidate=CANDIDATES[0])]
        )
    assert record.scores is None
    assert record.error.startswith("grade: the grade answer has 2 entries for 3 matched rows")
    assert record.stages.matching is not None  # the stages that finished are kept


def test_per_call_timeout_fails_the_pair(tmp_path):
    with StubServer(faults=["sleep:3"]) as server:
        (record,) = make_evaluator(server, tmp_path, cache=False, retries=1, timeout_s=0.5).evaluate(pairs(1))
    assert record.scores is None and "gave up after 1 attempts" in record.error


def test_wrong_api_key_fails_with_a_clear_message(tmp_path):
    with StubServer(api_key="right") as server:
        (record,) = make_evaluator(server, tmp_path, api_key="wrong", cache=False).evaluate(pairs(1))
    assert record.scores is None and "API key was refused" in record.error


def test_hosted_backend_sends_response_format_json_schema(tmp_path):
    with StubServer() as server:
        (record,) = make_evaluator(server, tmp_path, backend="hosted", cache=False).evaluate(pairs(1))
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
        (record,) = make_evaluator(server, tmp_path, cache=False).evaluate(
            [PairInput(reference=REFERENCE, candidate="   ")]
        )
        titles = [stage_of(b) for b in server.chat_requests()]
    assert titles.count("ExtractionAnswer") == 1 and "MatchingAnswer" not in titles
    assert record.scores.outcomes["mis"] == len(record.stages.reference_findings)
    assert "matching: no judge call, one side has no findings" in record.flags


def test_bad_pair_input_names_the_pair():
    evaluator = Evaluator.__new__(Evaluator)  # no judge needed: input is checked first
    evaluator.concurrency = 1
    with pytest.raises(ValueError, match="pair x7: candidate must be a string"):
        evaluator.evaluate([PairInput(reference="a", candidate=None, pair_id="x7")])
