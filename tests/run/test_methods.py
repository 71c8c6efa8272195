"""run/methods.py: the method by name (RadMatch's stages or a baseline's single call), and
what a pair's failure becomes in its record: never zero errors, never report text."""

from __future__ import annotations

import asyncio
import logging

import pytest

from radmatch_audit.core.records import Failure, PairInput
from radmatch_audit.core.schemas import SMALL_MODEL_LIMITS
from radmatch_audit.run.cache import AnswerCache
from radmatch_audit.run.calls import JudgeCalls, StageFailed
from radmatch_audit.run.methods import Baseline, RadMatch, failure_of, make_method
from radmatch_audit.testing.scripted import ScriptedJudge

SECRET = "Patient Jane Roe has a small effusion."


def test_make_method_by_name_and_its_stages():
    assert list(make_method("radmatch").stages) == ["extract", "match", "grade", "adjudicate"]
    radmatch = make_method("radmatch", adjudication=False, samples=3, max_tokens={"match": 99})
    assert isinstance(radmatch, RadMatch) and radmatch.samples == 3
    assert list(radmatch.stages) == ["extract", "match", "grade"] and radmatch.stages["match"].max_tokens == 99
    count = make_method("count")
    assert isinstance(count, Baseline) and list(count.stages) == ["baseline_count"]
    small, served = make_method("enumerate", limits=SMALL_MODEL_LIMITS), make_method("enumerate")
    assert small.stage.max_tokens < served.stage.max_tokens


def test_make_method_refuses_an_unknown_name_and_samples_of_a_baseline():
    with pytest.raises(ValueError, match=r"must be one of \['radmatch', 'count', 'enumerate'\]; got 'guess'"):
        make_method("guess")
    with pytest.raises(ValueError, match="the count baseline makes one call per pair; samples must be 1, got 2"):
        make_method("count", samples=2)


def test_failure_of_maps_each_kind_of_exception_and_logs_no_report_text(caplog):
    caplog.set_level(logging.DEBUG, logger="radmatch_audit.run.methods")
    stage = Failure(stage="match", cause="HTTP 503", attempts=3)
    assert failure_of(StageFailed(stage), "p1") is stage
    assert failure_of(ValueError("pair 'p1': stage matching is missing"), "p1") == Failure(
        stage="score", cause="pair 'p1': stage matching is missing")
    assert failure_of(KeyError(SECRET), "p1") == Failure(stage="internal", cause="internal error: KeyError")
    caplog.set_level(logging.INFO, logger="radmatch_audit.run.methods")
    failure_of(KeyError(SECRET), "p2")
    assert "pair p2: internal error KeyError" in caplog.text and SECRET not in caplog.text
    assert not caplog.records[-1].exc_info  # a traceback may quote report text: DEBUG only


class _BuggyJudge(ScriptedJudge):
    async def generate(self, messages, schema, *, max_tokens):
        if schema.__name__ == "MatchingAnswer":
            raise KeyError(SECRET)
        return await super().generate(messages, schema, max_tokens=max_tokens)


def evaluate(method, judge, reference=SECRET, candidate=SECRET):
    async def go():
        calls = JudgeCalls(judge, cache=AnswerCache(None))
        return await method.evaluate(calls, "p1", PairInput(reference=reference, candidate=candidate),
                                     "line 1", "chest_xray")
    return asyncio.run(go())


def test_a_pair_is_scored_and_a_failed_pair_keeps_its_stages_and_no_scores():
    judge = ScriptedJudge()
    record = evaluate(make_method("radmatch"), judge, candidate=SECRET + " Mild cardiomegaly.")
    assert record.error is None and record.scores.outcomes["spu"] == 1
    assert [stage for stage, _ in judge.calls] == ["extract", "extract", "match", "grade", "adjudicate"]
    assert record.stages.adjudication.answer is not None and record.usage.judge_calls == 5
    failed = evaluate(make_method("radmatch"), _BuggyJudge())
    assert failed.scores is None and failed.failure.stage == "internal"
    assert failed.stages.reference_findings and failed.stages.matching is None
    assert SECRET not in failed.error


def test_an_empty_reference_fails_the_pair_before_any_judge_call():
    for method in (make_method("radmatch"), make_method("count")):
        judge = ScriptedJudge()
        record = evaluate(method, judge, reference="  \n")
        assert record.error == "input: the reference report is empty" and judge.calls == []
