"""scoring/stability.py: how far a sampled record's actionable errors spread, and each unit's
majority outcome across the scored samples, known by its findings' text."""

from __future__ import annotations

from builders import f, fig3_record, grading

from radmatch_audit.core.records import Sample
from radmatch_audit.scoring.record import score_record
from radmatch_audit.scoring.stability import stability

NO_ERRORS = grading({(f"p_{i}", f"gt_{i}"): [] for i in range(1, 5)})


def sampled_record():
    """fig3 (2 actionable errors); the same again; one with no grading errors (1 left:
    gt_1's comparison) that writes gt_1's text differently and adds a routine spurious
    finding; and one failed sample."""
    rec = fig3_record()
    stages = rec.stages
    gt = [g.model_copy(update={"text": "  FINDING   GT_1. "}) if g.id == "gt_1" else g
          for g in stages.reference_findings]
    matching = stages.matching.model_copy(update={"unmatched_pred": ["p_5"]})
    calm = stages.model_copy(update={
        "grading": NO_ERRORS, "reference_findings": gt, "matching": matching,
        "candidate_findings": [*stages.candidate_findings, f("p_5", text="Rib fracture.")],
    })
    samples = [Sample(index=1, stages=stages), Sample(index=2, stages=calm),
               Sample(index=3, error="extract: judge returned invalid JSON")]
    return score_record(rec.model_copy(update={"samples": samples}))


def test_spread_counts_only_the_scored_samples():
    result = sampled_record().stability
    assert result.samples == 4 and result.scored == 3
    assert result.actionable_errors == [2, 2, 1, None]
    assert result.spread == 1 and result.identical is False


def test_a_unit_is_known_by_its_text_and_takes_the_outcome_most_samples_give():
    votes = {(v.side, v.unit): v for v in sampled_record().stability.units}
    assert votes["reference", "finding gt_1."].outcomes == ["INC", "INC", "INC"]  # text differs
    assert votes["reference", "finding gt_2."].outcomes == ["INC", "INC", "COR"]
    assert votes["reference", "finding gt_2."].majority == "INC"
    assert votes["reference", "finding gt_3."].majority == "PAR"
    spurious = votes["candidate", "rib fracture."]
    assert spurious.outcomes == [None, None, "SPU"] and spurious.majority is None


def test_a_split_unit_has_no_majority_and_a_record_of_one_sample_no_stability():
    rec = fig3_record()
    calm = rec.stages.model_copy(update={"grading": NO_ERRORS})
    two = score_record(rec.model_copy(update={"samples": [Sample(index=1, stages=calm)]}))
    votes = {v.unit: v for v in two.stability.units}
    assert votes["finding gt_2."].outcomes == ["INC", "COR"] and votes["finding gt_2."].majority is None
    assert votes["finding gt_4."].majority == "PAR"
    assert stability(score_record(rec)) is None
