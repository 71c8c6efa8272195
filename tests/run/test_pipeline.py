"""One runner for RadMatch and the single-call baselines (issue 28 item 3), and the
baseline record typed beside the audit record, with its own versions and migrations."""

from __future__ import annotations

import json

import pytest

from radmatch_audit import Evaluator, PairInput, Record
from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
from radmatch_audit.core.records import (
    BaselineRecord, UnknownSchemaVersion, failed_input, load_record, migrate,
)
from radmatch_audit.core.schemas import SMALL_MODEL_LIMITS
from radmatch_audit.testing import fake_server
from radmatch_audit.testing.fake_server import StubServer

# a line as `radmatch-audit baseline` wrote it before the record was typed
OLD_LINE = json.dumps({
    "record_type": "baseline", "schema_version": 1, "method": "count", "pair_id": "p1",
    "study_id": "s1", "modality": None, "source": "line 1", "reference": "Effusion.",
    "candidate": "Clear.", "indication": None,
    "judge": {"backend": "vllm", "model": "stub-judge", "prompt_version": "baseline-v1-f021d1e05cb5",
              "loaded_model": None, "max_model_len": None},
    "answer": {"errors": 1}, "errors": 1, "error": None, "failure": None,
    "timings_s": {"total": 0.0123},
    "usage": {"prompt_tokens": 540, "completion_tokens": 3, "judge_calls": 1, "cached_calls": 0},
}, ensure_ascii=False)


def test_an_old_baseline_line_loads_typed_and_writes_back_unchanged():
    record = load_record(json.loads(OLD_LINE))
    assert isinstance(record, BaselineRecord) and record.errors == 1 and not record.failed
    assert record.to_json() == OLD_LINE
    # an audit record has no record_type: the discriminator's default
    audit = load_record({"pair_id": "a", "reference": "x", "candidate": "y"})
    assert isinstance(audit, Record)


def test_each_kind_of_record_has_its_own_versions():
    with pytest.raises(UnknownSchemaVersion, match="reads versions 1 to 1"):
        migrate({**json.loads(OLD_LINE), "schema_version": 2})
    with pytest.raises(UnknownSchemaVersion, match="record_type 'pairwise' is not known"):
        migrate({"record_type": "pairwise", "pair_id": "a"})
    old_audit = {"schema_version": 1, "pair_id": "a", "reference": "x", "candidate": "y",
                 "judge": {"prompt_version": "v1-abc"}}
    assert migrate(old_audit)["schema_version"] == 4  # the audit record's migrations still run


def test_a_bad_row_of_a_baseline_run_is_a_failed_baseline_record():
    record = failed_input("p9", "line 3: no candidate", source="line 3", method="enumerate",
                          reference="Effusion.", indication=None)
    assert isinstance(record, BaselineRecord) and record.method == "enumerate"
    assert record.errors is None and record.failure.stage == "input"
    assert record.error == "input: line 3: no candidate" and record.reference == "Effusion."
    assert isinstance(failed_input("p9", "bad", reference="x"), Record)


@pytest.fixture
def server(monkeypatch):
    """The stub server, taught the count schema: one error per candidate sentence that the
    reference does not have."""
    toy = fake_server.toy_answer

    def answer(title, user, schema):
        if title == "CountAnswer":
            extra = set(user["candidate"].split(". ")) - set(user["reference"].split(". "))
            return {"errors": len(extra)}
        return toy(title, user, schema)

    monkeypatch.setattr(fake_server, "toy_answer", answer)
    with StubServer() as stub:
        yield stub


def _judge(server):
    return OpenAICompatibleJudge(base_url=server.base_url, model="stub-judge", backend="vllm")


def test_one_runner_runs_radmatch_or_a_baseline_with_the_same_loop_cache_and_judge(server, tmp_path):
    pairs = [PairInput(reference="Small effusion. No pneumothorax.", candidate="Small effusion. A nodule.",
                       pair_id="a", study_id="s1"),
             PairInput(reference=" ", candidate="Clear.", pair_id="empty")]
    with Evaluator(_judge(server), method="count", cache_dir=tmp_path / "cache") as runner:
        first = runner.evaluate(pairs)
        again = runner.evaluate(pairs[:1])  # the same call: answered by the runner's cache
    assert [type(r) for r in first] == [BaselineRecord, BaselineRecord]
    assert first[0].errors == 1 and first[0].judge.prompt_version.startswith("baseline-v1-")
    assert first[0].usage.judge_calls == 1 and again[0].usage.cached_calls == 1
    assert first[1].errors is None and first[1].failure.stage == "input"
    assert runner.stats.pairs == 3 and runner.stats.failed == 1
    assert set(runner.stages) == {"baseline_count"}

    with Evaluator(_judge(server), cache_dir=tmp_path / "cache") as runner:
        (record,) = runner.evaluate(pairs[:1])
    assert isinstance(record, Record) and record.scores is not None
    assert set(record.judge.prompt_version) == set(runner.stages) == {"extract", "match", "grade", "adjudicate"}


def test_a_baseline_takes_a_small_models_caps_and_one_sample_only(server):
    with Evaluator(_judge(server), method="enumerate", limits=SMALL_MODEL_LIMITS) as runner:
        (stage,) = runner.stages.values()
        assert stage.max_tokens == 300 and '"maxItems": 4' in json.dumps(stage.grammar().model_json_schema())
    with pytest.raises(ValueError, match="samples must be 1"):
        Evaluator(_judge(server), method="count", samples=2)
    with pytest.raises(ValueError, match="'method' parameter must be one of"):
        Evaluator(_judge(server), method="guess")
