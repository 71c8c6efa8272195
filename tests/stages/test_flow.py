"""stages/flow.py: the stages a pair goes through; keyed grading answers (docs/judge.md rule 18)."""

from __future__ import annotations

import asyncio
import json

import pytest
from builders import f, matching, row

from radmatch_audit import Evaluator, PairInput
from radmatch_audit.core.schemas import GradingStage
from radmatch_audit.stages.flow import (
    extract_findings,
    find_indication,
    grade_rows,
    match_findings,
    rows_to_grade,
)
from radmatch_audit.testing.scripted import ScriptedJudge

TWO_ROWS = "Small left pleural effusion. Mild cardiomegaly."


# ------------------------------------------------------------------ keyed grading


class _RegradingJudge(ScriptedJudge):
    """The scripted judge, with its grading answer rewritten by `rewrite(grades)`."""

    def __init__(self, rewrite) -> None:
        super().__init__()
        self.rewrite = rewrite
        self.grade_calls = 0

    async def generate(self, messages, schema, *, max_tokens):
        result = await super().generate(messages, schema, max_tokens=max_tokens)
        if schema.__name__ != "GradingAnswer":
            return result
        self.grade_calls += 1
        answer = json.loads(result.text)
        answer["grades"] = self.rewrite(answer["grades"])
        return type(result)(text=json.dumps(answer), usage=result.usage)


def evaluate(judge, reference=TWO_ROWS, candidate=TWO_ROWS):
    with Evaluator(judge) as evaluator:
        (record,) = evaluator.evaluate([PairInput(reference=reference, candidate=candidate)])
    return record


def test_a_grading_answer_is_stored_keyed_and_errors_land_on_the_row_they_name():
    def errors_on_second_row_listed_first(grades):
        second = {**grades[1], "errors": [
            {"reasoning": "Larger.", "dimension": "severity", "severity": "major"}]}
        return [second, grades[0]]  # answer order differs from the rows sent

    record = evaluate(_RegradingJudge(errors_on_second_row_listed_first))
    grading = record.stages.grading
    assert grading.pairs == [("p_1", "gt_1"), ("p_2", "gt_2")]
    assert [(g.pred_id, g.gt_id) for g in grading.grades] == [("p_2", "gt_2"), ("p_1", "gt_1")]
    assert grading.errors_for("p_1", "gt_1") == []
    assert [e.dimension for e in grading.errors_for("p_2", "gt_2")] == ["severity"]
    assert grading.errors_for("p_9", "gt_9") is None
    outcomes = {tuple(u.pred_ids): u.outcome for u in record.scores.units}
    assert outcomes == {("p_1",): "COR", ("p_2",): "INC"}
    stored = json.loads(record.to_json())["stages"]["grading"]["grades"][0]
    assert list(stored) == ["pred_id", "gt_id", "errors"]
    assert list(stored["errors"][0]) == ["reasoning", "dimension", "severity"]


@pytest.mark.parametrize("rewrite, why", [
    # a skipped row and an extra one: a positional answer would have shifted silently
    (lambda g: [g[0], {**g[1], "gt_id": "gt_1"}], "has an entry for p_2-gt_1, a row that was not sent"),
    (lambda g: [g[0], g[0]], "grades p_1-gt_1 more than once"),
    (lambda g: g[:1], "has no entry for row(s) p_2-gt_2"),
])
def test_a_grading_answer_that_misnames_its_rows_is_retried_once_then_fails_the_pair(rewrite, why):
    judge = _RegradingJudge(rewrite)
    record = evaluate(judge)
    assert judge.grade_calls == 2  # the invalid answer was retried once
    assert record.scores is None and record.failure.stage == "grade"
    assert why in record.error
    assert record.stages.matching is not None  # what finished is kept


def test_one_bad_grading_answer_then_a_good_one_scores_the_pair():
    answers = iter([lambda g: g[:1], lambda g: g])
    judge = _RegradingJudge(lambda g: next(answers)(g))
    record = evaluate(judge)
    assert judge.grade_calls == 2 and record.error is None
    assert record.scores.outcomes["cor"] == 2


# ------------------------------------------------------------------ the stages' pieces

REPORT = "INDICATION: Fever and productive cough for three days.\nFINDINGS: Clear lungs."


def test_find_indication_prefers_the_given_one_else_reads_the_reference_and_cuts_at_a_word():
    assert find_indication(REPORT, "  Chest pain. ") == ("Chest pain.", False)
    assert find_indication(REPORT, "   ") == (None, False)  # given as empty: none, not the reference's
    assert find_indication(REPORT, None) == ("Fever and productive cough for three days.", False)
    assert find_indication(REPORT, None, 20) == ("Fever and productive", True)
    assert find_indication("FINDINGS: Clear lungs.", None) == (None, False)


def test_rows_to_grade_are_the_repaired_rows_without_generic_ones():
    reference = [f("gt_1"), f("gt_2", status="normal")]
    candidate = [f("p_1"), f("p_2", status="normal"), f("p_3", status="normal")]
    answer = matching([row("p_2", "gt_2", scope="generic"), row("p_1", "gt_1"), row("p_3", "gt_2", scope="generic"),
                       row("p_9", "gt_1"), row("p_1", "gt_1", scope="generic")])
    # the unknown p_9 and the generic duplicate of (p_1, gt_1) are repaired away
    assert rows_to_grade(answer, reference, candidate) == [("p_1", "gt_1")]


def test_what_need_not_be_asked_is_not_asked():
    asked = []

    async def ask(stage, user_input, rows=None):
        asked.append(stage)
        raise AssertionError("the judge was asked")

    assert asyncio.run(extract_findings(" \n", None, ask, "gt")) == []
    answer, was_asked = asyncio.run(match_findings([f("gt_1")], [], None, ask))
    assert not was_asked and answer.unmatched_gt == ["gt_1"] and answer.matches == []
    assert asyncio.run(grade_rows([], {}, None, ask)) == GradingStage()
    assert asked == []
