"""The error adjudication (docs/judge.md, docs/scoring.md section 5) and scoring contract 4.

Contract 4: an actionable INC unit counts once per distinct status-inverted finding.
The adjudication: one call per pair after scoring, shown every non-COR unit; its answer
is stored with the units it was shown and gives `significant_errors`, which is null when
it failed, is stale (the units changed) or does not answer each unit once.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from builders import f, fig3_record, grading, matching, record, row
from pydantic import ValidationError

from radmatch_audit import Evaluator, PairInput
from radmatch_audit.judges.config import JudgeConfig
from radmatch_audit.judges.base import JudgeError
from radmatch_audit.core.records import load_record
from radmatch_audit.core.schemas import (
    SERVER_LIMITS, SMALL_MODEL_LIMITS, AdjudicationAnswer, AdjudicationStage, ShownUnit, answer_models,
    validation_models,
)
from radmatch_audit.scoring import score_record
from radmatch_audit.stages.adjudication import adjudication_input
from radmatch_audit.testing.scripted import ScriptedJudge

DATA = Path(__file__).parents[1] / "data"


def umbrella_record(second_status: str = "abnormal"):
    """"Lungs are clear." (normal) bound to two candidate consolidations."""
    gt = [f("gt_1", status="normal", sig="urgent", text="Lungs are clear.")]
    pred = [f("p_1", sig="urgent", text="Right lower lobe consolidation."),
            f("p_2", status=second_status, sig="urgent", text="Left lower lobe consolidation.")]
    return record("umbrella", gt, pred, matching([row("p_1", "gt_1"), row("p_2", "gt_1")]),
                  grading({("p_1", "gt_1"): [], ("p_2", "gt_1"): []}))


# ---------------------------------------------------------------- contract 4


def test_a_normal_umbrella_against_two_invented_findings_counts_two():
    scores = score_record(umbrella_record()).scores
    (unit,) = scores.units
    assert unit.outcome == "INC" and unit.actionable and unit.actionable_errors == 2
    assert scores.actionable_errors == 2
    assert scores.subsets["abnormal"]["actionable_errors"] == 2


def test_an_inc_unit_with_one_inverted_finding_counts_one():
    scores = score_record(umbrella_record(second_status="normal")).scores
    assert scores.units[0].actionable_errors == 1 and scores.actionable_errors == 1


def test_an_inc_unit_without_status_inversion_counts_once_whatever_its_rows():
    gt = [f("gt_1", sig="urgent", comparison="new")]
    pred = [f("p_1", sig="urgent", comparison="stable"), f("p_2", sig="urgent", comparison="stable")]
    rec = record("nostatus", gt, pred, matching([row("p_1", "gt_1"), row("p_2", "gt_1")]),
                 grading({("p_1", "gt_1"): [], ("p_2", "gt_1"): []}))
    scores = score_record(rec).scores
    assert scores.units[0].outcome == "INC" and scores.actionable_errors == 1


def test_a_routine_inc_unit_with_inversions_counts_nothing():
    rec = umbrella_record()
    for finding in rec.stages.reference_findings + rec.stages.candidate_findings:
        finding.clinical_significance = "routine"
    scores = score_record(rec).scores
    assert scores.units[0].outcome == "INC" and scores.units[0].actionable_errors == 0
    assert scores.actionable_errors == 0


# ---------------------------------------------------------------- significant_errors


def adjudicated(rec, counts, unlisted=()):
    """`rec` scored, with an adjudication answering its non-COR units with `counts`."""
    scored = score_record(rec)
    _, stage = adjudication_input(scored)
    stage.answer = AdjudicationAnswer.model_validate({
        "units": [{"unit": i, "reasoning": "r", "errors": c} for i, c in enumerate(counts, 1)],
        "unlisted": [{"description": d} for d in unlisted],
    })
    scored.stages.adjudication = stage
    return score_record(scored)


def test_significant_errors_sum_the_units_and_the_unlisted_errors():
    rec = adjudicated(fig3_record(), [1, 1, 0, 2], unlisted=["a tube tip no unit holds"])
    scores = rec.scores
    shown = [u for u in scores.units if u.outcome != "COR"]
    assert sorted(u.outcome for u in shown) == ["INC", "INC", "PAR", "PAR"]
    assert scores.adjudication == "current"
    assert [u.significant_errors for u in shown] == [1, 1, 0, 2]
    assert scores.significant_errors == 4 + 1
    assert scores.unlisted_errors == 1
    assert all(u.significant_errors is None for u in scores.units if u.outcome == "COR")


def test_a_unit_shown_gets_its_own_count_whatever_order_the_answer_takes():
    rec = score_record(fig3_record())
    _, stage = adjudication_input(rec)
    n = len(stage.units)
    stage.answer = AdjudicationAnswer.model_validate({
        "units": [{"unit": i, "reasoning": "r", "errors": i % 3} for i in range(n, 0, -1)]})
    rec.stages.adjudication = stage
    scores = score_record(rec).scores
    shown = [u for u in scores.units if u.outcome != "COR"]
    assert [u.significant_errors for u in shown] == [i % 3 for i in range(1, n + 1)]


def test_units_that_changed_make_the_adjudication_stale_never_realigned():
    rec = adjudicated(fig3_record(), [1, 1, 1, 1])
    assert rec.scores.adjudication == "current"
    # a later rule that changes the units: the grader's major severity error goes away
    rec.stages.grading = grading({("p_1", "gt_1"): [], ("p_2", "gt_2"): [],
                                  ("p_3", "gt_3"): [("certainty", "minor")], ("p_4", "gt_4"): [("severity", "minor")]})
    again = score_record(rec)
    assert again.scores.adjudication == "stale" and again.scores.significant_errors is None
    assert any("stale" in r for r in again.repairs)
    assert again.scores.actionable_errors is not None  # the other scores stand


@pytest.mark.parametrize("entries", [
    [{"unit": i, "reasoning": "r", "errors": 1} for i in (1, 2, 3)],  # a unit left out
    [{"unit": i, "reasoning": "r", "errors": 1} for i in (1, 1, 2, 3, 4)],  # one twice
    [{"unit": i, "reasoning": "r", "errors": 9 if i == 1 else 0} for i in (1, 2, 3, 4)],  # out of range
])
def test_a_stored_answer_that_does_not_answer_each_unit_once_gives_no_count(entries):
    rec = score_record(fig3_record())
    _, stage = adjudication_input(rec)
    assert len(stage.units) == 4
    stage.answer = AdjudicationAnswer.model_validate({"units": entries})
    rec.stages.adjudication = stage
    scores = score_record(rec).scores
    assert scores.adjudication == "invalid" and scores.significant_errors is None


def test_a_failed_or_absent_adjudication_gives_no_count():
    rec = score_record(fig3_record())
    assert rec.scores.adjudication == "off" and rec.scores.significant_errors is None
    rec.stages.adjudication = AdjudicationStage(units=[ShownUnit(kind="MIS", gt_ids=["gt_9"])], error="adjudicate: down")
    assert score_record(rec).scores.adjudication == "failed"


# ---------------------------------------------------------------- the answer model


def test_a_served_answer_must_answer_every_unit_shown_once_by_number():
    validator = validation_models(SERVER_LIMITS).for_stage("adjudicate", 2)
    ok = {"units": [{"unit": 2, "reasoning": "b", "errors": 0}, {"unit": 1, "reasoning": "a", "errors": 1}]}
    assert validator.model_validate(ok).units[0].unit == 2
    for bad, why in [
        ({"units": [{"unit": 1, "reasoning": "a", "errors": 1}]}, "no entry for unit"),
        ({"units": [{"unit": 1, "reasoning": "a", "errors": 1}] * 2}, "more than once"),
        ({"units": [{"unit": 1, "reasoning": "a", "errors": 0}, {"unit": 3, "reasoning": "c", "errors": 0}]},
         "not shown"),
        ({"units": [{"unit": 1, "reasoning": "a", "errors": 6}, {"unit": 2, "reasoning": "b", "errors": 0}]},
         "errors"),
        ({"units": [{"unit": 1, "errors": 1, "reasoning": ""}, {"unit": 2, "reasoning": "b", "errors": 0}]},
         "reasoning"),
    ]:
        with pytest.raises(ValidationError, match=why):
            validator.model_validate(bad)


def test_the_small_judge_grammar_numbers_its_entries_and_caps_the_unlisted():
    schema = answer_models(SMALL_MODEL_LIMITS).for_stage("adjudicate", 3).model_json_schema()
    items = schema["properties"]["units"]["prefixItems"]
    assert [schema["$defs"][i["$ref"].split("/")[-1]]["properties"]["unit"]["const"] for i in items] == [1, 2, 3]
    assert schema["properties"]["units"]["minItems"] == schema["properties"]["units"]["maxItems"] == 3
    assert schema["properties"]["unlisted"]["maxItems"] == SMALL_MODEL_LIMITS.unlisted
    unit = schema["$defs"]["AdjudicatedUnit1"]["properties"]
    assert list(unit) == ["unit", "reasoning", "errors"]  # the reasoning before the verdict
    assert unit["errors"]["enum"] == [0, 1, 2, 3, 4, 5]


# ---------------------------------------------------------------- the stage in a run

REF = "Small right pleural effusion. No pneumothorax. Heart size is normal."
MISSED = "No pneumothorax. Heart size is normal. Large mass in the left lung."


class FailingAdjudication(ScriptedJudge):
    async def generate(self, messages, schema, *, max_tokens):
        if schema.__name__ == "AdjudicationAnswer":
            raise JudgeError("the server closed the connection")
        return await super().generate(messages, schema, max_tokens=max_tokens)


def run(pairs, judge=None, **kwargs):
    judge = judge or ScriptedJudge()
    with Evaluator(judge, **kwargs) as evaluator:
        return evaluator.evaluate(pairs), judge


def test_one_more_call_per_pair_shown_the_non_cor_units_without_tiers():
    (rec,), judge = run([PairInput(reference=REF, candidate=MISSED, indication="Cough.")])
    stages = [stage for stage, _ in judge.calls]
    assert stages.count("adjudicate") == 1 and len(stages) == 5
    user = next(u for s, u in judge.calls if s == "adjudicate")
    assert user["reference"] == REF and user["candidate"] == MISSED and user["indication"] == "Cough."
    assert [u["kind"] for u in user["units"]] == ["MIS", "SPU"]
    assert "tier" not in json.dumps(user["units"]) and "urgent" not in json.dumps(user["units"])
    assert rec.scores.adjudication == "current" and rec.scores.significant_errors == 2
    assert rec.usage.judge_calls == 5 and rec.timings_s.adjudicate > 0
    assert "adjudicate" in rec.judge.prompt_version


def test_a_pair_with_every_unit_correct_needs_no_adjudication_call():
    (rec,), judge = run([PairInput(reference=REF, candidate=REF)])
    assert "adjudicate" not in [s for s, _ in judge.calls]
    assert rec.scores.significant_errors == 0 and rec.scores.adjudication == "current"


def test_no_adjudication_makes_no_call_and_leaves_the_count_null():
    (rec,), judge = run([PairInput(reference=REF, candidate=MISSED)], adjudication=False)
    assert "adjudicate" not in [s for s, _ in judge.calls]
    assert rec.stages.adjudication is None and rec.scores.adjudication == "off"
    assert rec.scores.significant_errors is None and rec.scores.actionable_errors >= 1
    assert "adjudicate" not in rec.judge.prompt_version
    assert "adjudication" not in json.loads(rec.to_json())["stages"]


def test_the_option_is_declared_once_for_flags_variables_and_the_evaluator():
    assert JudgeConfig.from_env({"RADMATCH_ADJUDICATION": "0"}).adjudication is False
    assert JudgeConfig.options()["adjudication"].flag == "--no-adjudication"
    with Evaluator.from_config(JudgeConfig(adjudication=False), judge=ScriptedJudge()) as evaluator:
        assert "adjudicate" not in evaluator.stages


def test_a_failed_adjudication_leaves_the_other_scores_and_says_so():
    (rec,), _ = run([PairInput(reference=REF, candidate=MISSED)], judge=FailingAdjudication(), retries=1)
    assert rec.error is None and rec.scores.actionable_errors >= 1  # never a failed pair
    assert rec.scores.adjudication == "failed" and rec.scores.significant_errors is None
    assert "the server closed the connection" in rec.stages.adjudication.error
    assert [u.kind for u in rec.stages.adjudication.units] == ["MIS", "SPU"]
    assert any(flag.startswith("adjudication failed") for flag in rec.flags)


def test_the_answer_cache_covers_the_adjudication(tmp_path):
    pair = PairInput(reference=REF, candidate=MISSED)
    run([pair], cache_dir=tmp_path)
    (again,), judge = run([pair], cache_dir=tmp_path)
    assert judge.calls == [] and again.usage.cached and again.scores.significant_errors == 2


def test_the_stored_record_recomputes_to_the_same_counts():
    (rec,), _ = run([PairInput(reference=REF, candidate=MISSED)])
    read = load_record(json.loads(rec.to_json()))
    assert read.schema_version == 4
    again = score_record(read)
    assert again.scores.significant_errors == rec.scores.significant_errors == 2
    assert [u.significant_errors for u in again.scores.units] == [u.significant_errors for u in rec.scores.units]


# ---------------------------------------------------------------- records of earlier versions


def test_records_of_every_earlier_version_load_and_recompute_under_contract_4():
    with gzip.open(DATA / "records_bdb6a1e.jsonl.gz", "rt", encoding="utf-8") as lines:
        stored = [json.loads(line) for line in lines if line.strip()]
    versions = {d.get("schema_version") for d in stored}
    assert 2 in versions
    moved = 0
    for data in stored:
        rec = load_record(data)
        if getattr(rec, "scores", None) is None:
            continue
        for unit in rec.scores.units:  # the migration: what each unit added under its contract
            assert unit.actionable_errors == int(unit.actionable)
        assert rec.scores.significant_errors is None and rec.scores.adjudication == "off"
        again = score_record(rec)
        assert again.scores.actionable_errors == sum(u.actionable_errors for u in again.scores.units)
        moved += again.scores.actionable_errors != sum(u.actionable for u in again.scores.units)
    assert moved > 0  # contract 4 moves some stored pairs (scripts/contract_changes.py says which)


def test_a_version_3_record_migrates_to_4():
    rec = score_record(umbrella_record())
    data = json.loads(rec.to_json())
    data["schema_version"] = 3
    for unit in data["scores"]["units"]:
        del unit["actionable_errors"], unit["significant_errors"]
    for key in ("significant_errors", "adjudication", "unlisted_errors"):
        del data["scores"][key]
    read = load_record(data)
    assert read.schema_version == 4 and read.scores.units[0].actionable_errors == 1
    assert score_record(read).scores.actionable_errors == 2
