"""Exemplars and code agree (issue 26 item 6): what each match and grade exemplar says
the scoring code makes of its answer ("expected") is what the code makes of it.

The answers are played back the way a judge's answer travels: validated on arrival for
the rows sent (keyed grading), stored in a record, scored by `radmatch_audit.read.recompute`:
- grade: every pair as its own 1:1 direct unit, with the exemplar's grading entry ->
  the unit's outcome (COR, PAR or INC);
- match: the matching as given, repaired, no grading -> the numbers of MIS, SPU and
  generic units, and how many MIS/SPU units count as actionable errors;
- adjudicate: the answer stored with the units it was shown -> the pair's
  significant_errors (the units' counts plus the unlisted errors).
Every match, grade and adjudicate exemplar must carry "expected" (the loader drops it:
the judge never sees it).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from radmatch_audit.stages import fewshot_dir, load_exemplars
from radmatch_audit.read.recompute import score_record
from radmatch_audit.core.records import Record, Stages
from radmatch_audit.core.schemas import (
    SERVER_LIMITS,
    AdjudicationStage,
    SMALL_MODEL_LIMITS,
    Finding,
    GradingStage,
    MatchingAnswer,
    ShownUnit,
    answer_models,
    validation_models,
)
from radmatch_audit.core.scores import Unit
from radmatch_audit.scoring.adjudication import adjudicated_counts
from radmatch_audit.stages import rows_to_grade
from radmatch_audit.core.vocabulary import MODALITIES

OUTCOMES = {"COR", "PAR", "INC"}
MATCH_KEYS = ("mis", "spu", "generic", "actionable_unmatched")


def _exemplars(stage: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for modality in MODALITIES:
        doc = json.loads((fewshot_dir() / modality / f"{stage}.json").read_text(encoding="utf-8"))
        found += [(f"{modality}/{stage}.json exemplar {i}", ex) for i, ex in enumerate(doc["exemplars"])]
    return found


GRADE = _exemplars("grade")
MATCH = _exemplars("match")
ADJUDICATE = _exemplars("adjudicate")


def _finding(view: dict[str, Any]) -> Finding:
    return Finding(id=view["finding_id"], **{k: v for k, v in view.items() if k != "finding_id"})


def _scored(gt: list[Finding], pred: list[Finding], matching: MatchingAnswer,
            grading: GradingStage | None) -> Record:
    record = Record(pair_id="exemplar", reference="", candidate="", stages=Stages(
        reference_findings=gt, candidate_findings=pred, matching=matching, grading=grading))
    return score_record(record)


def _expected(where: str, ex: dict[str, Any]) -> Any:
    if "expected" not in ex:
        pytest.fail(f"{where} has no 'expected': every match, grade and adjudicate exemplar must say what "
                    "the scoring code makes of its answer")
    return ex["expected"]


@pytest.mark.parametrize("where, ex", GRADE, ids=[w for w, _ in GRADE])
def test_grade_exemplar_outcomes_are_what_the_code_gives(where, ex):
    expected = _expected(where, ex)
    pairs, answer = ex["input"]["pairs"], ex["output"]
    sent = [(p["pred_finding"]["finding_id"], p["gt_finding"]["finding_id"]) for p in pairs]
    assert isinstance(expected, list) and len(expected) == len(pairs), \
        f"{where}: 'expected' must hold one entry per input pair ({len(pairs)})"
    for want, row in zip(expected, sent):
        assert set(want) == {"pred_id", "gt_id", "outcome"} and want["outcome"] in OUTCOMES, (where, want)
        assert (want["pred_id"], want["gt_id"]) == row, f"{where}: 'expected' is not in input order"
    # the answer as it would arrive from either kind of judge: every row sent, once, by id
    for limits in (SERVER_LIMITS, SMALL_MODEL_LIMITS):
        validation_models(limits).for_stage("grade", sent).model_validate(answer)
    # and the small judge's grammar, whose entries carry the rows' ids, admits it
    answer_models(SMALL_MODEL_LIMITS).for_stage("grade", sent).model_validate(answer)

    for pair, want in zip(pairs, expected):
        pred, gt = _finding(pair["pred_finding"]), _finding(pair["gt_finding"])
        row = (pred.id, gt.id)
        matching = MatchingAnswer.model_validate({
            "matches": [{"pred_id": pred.id, "gt_id": gt.id, "reasoning": "", "match_scope": "direct"}],
            "unmatched_pred": [], "unmatched_gt": []})
        entry = next(e for e in answer["grades"] if (e["pred_id"], e["gt_id"]) == row)
        grading = GradingStage.model_validate({"pairs": [row], "grades": [entry]})
        scored = _scored([gt], [pred], matching, grading)
        (unit,) = scored.scores.units
        got = unit.outcome
        why = [(e.dimension, e.severity, e.source) for e in unit.errors]
        assert got == want["outcome"], f"{where} {pred.id}-{gt.id}: expected {want['outcome']}, the code gives {got} {why}"
        assert not any("ignored" in r or "no grading entry" in r for r in scored.repairs), (where, scored.repairs)


@pytest.mark.parametrize("where, ex", MATCH, ids=[w for w, _ in MATCH])
def test_match_exemplar_counts_are_what_the_code_gives(where, ex):
    expected = _expected(where, ex)
    assert isinstance(expected, dict) and sorted(expected) == sorted(MATCH_KEYS), \
        f"{where}: 'expected' must have exactly the keys {list(MATCH_KEYS)}"
    assert all(isinstance(v, int) and v >= 0 for v in expected.values()), (where, expected)
    gt = [_finding(f) for f in ex["input"]["gt_findings"]]
    pred = [_finding(f) for f in ex["input"]["pred_findings"]]
    matching = MatchingAnswer.model_validate(ex["output"])
    scored = _scored(gt, pred, matching, None)
    units = scored.scores.units
    kinds = Counter(u.kind for u in units)
    got = {"mis": kinds["mis"], "spu": kinds["spu"], "generic": kinds["generic"],
           "actionable_unmatched": sum(u.actionable for u in units if u.kind in ("mis", "spu"))}
    assert got == expected, f"{where}: expected {expected}, the code gives {got} (repairs: {scored.repairs})"
    # what the pipeline would send to grading is exactly the matched units' repaired rows
    graded = {r for r in rows_to_grade(matching, gt, pred)}
    assert graded == {(r.pred_id, r.gt_id) for u in units if u.kind == "matched" for r in u.rows}, where


def _shown(view: dict[str, Any]) -> Unit:
    """A unit as scoring holds it, from the view the exemplar shows (ids made up per unit)."""
    n = view["unit"]
    gt = [f"gt_{n}_{i}" for i in range(len(view["reference_findings"]))]
    pred = [f"p_{n}_{i}" for i in range(len(view["candidate_findings"]))]
    kind = {"MIS": "mis", "SPU": "spu"}.get(view["kind"], "matched")
    return Unit(kind, gt, pred, [], view["kind"], "routine", False, [])


@pytest.mark.parametrize("where, ex", ADJUDICATE, ids=[w for w, _ in ADJUDICATE])
def test_adjudicate_exemplar_count_is_what_the_code_gives(where, ex):
    expected = _expected(where, ex)
    assert isinstance(expected, int) and expected >= 0, (where, expected)
    views, answer = ex["input"]["units"], ex["output"]
    # the answer as it would arrive from either kind of judge, for the units shown
    for limits in (SERVER_LIMITS, SMALL_MODEL_LIMITS):
        validation_models(limits).for_stage("adjudicate", len(views)).model_validate(answer)
    units = [_shown(view) for view in views]
    stage = AdjudicationStage.model_validate({
        "units": [ShownUnit(kind=u.outcome, gt_ids=u.gt_ids, pred_ids=u.pred_ids) for u in units],
        "answer": answer})
    repairs: list[str] = []
    got, state, unlisted = adjudicated_counts(units, stage, repairs)
    assert (state, repairs) == ("current", []), where
    assert got == expected, f"{where}: expected {expected}, the code gives {got}"
    assert [u.significant_errors for u in units] == [a["errors"] for a in answer["units"]], where
    assert unlisted == len(answer.get("unlisted", [])), where


def test_the_judge_never_sees_expected():
    for modality in MODALITIES:
        for stage in ("match", "grade", "adjudicate"):
            assert all(set(ex) == {"input", "output"} for ex in load_exemplars(modality, stage))


def test_a_grade_exemplar_whose_ids_do_not_name_its_pairs_is_refused(tmp_path, monkeypatch):
    from radmatch_audit.stages import FewshotError

    for modality in MODALITIES:
        for stage in ("extract", "match", "grade"):
            (tmp_path / modality).mkdir(exist_ok=True)
            (tmp_path / modality / f"{stage}.json").write_text(
                (fewshot_dir() / modality / f"{stage}.json").read_text(encoding="utf-8"), encoding="utf-8")
    path = tmp_path / "chest_xray" / "grade.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    grades = doc["exemplars"][0]["output"]["grades"]
    grades[0], grades[1] = grades[1], grades[0]  # the verdicts moved onto the other rows
    path.write_text(json.dumps(doc), encoding="utf-8")
    monkeypatch.setenv("RADMATCH_FEWSHOT_DIR", str(tmp_path))
    with pytest.raises(FewshotError, match="must name the input pairs in order"):
        load_exemplars("chest_xray", "grade")
