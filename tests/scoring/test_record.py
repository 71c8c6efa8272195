"""scoring/record.py: a record's scores re-derived from its stored stages; a failed record
stays unscored; a record missing a stage is refused with an error naming the pair."""

from __future__ import annotations

import dataclasses

import pytest
from builders import fig3_record

from radmatch_audit.core.records import Sample
from radmatch_audit.scoring.record import ensure_scored, score_record


def test_scores_come_from_the_stages_not_from_what_was_stored():
    scored = score_record(fig3_record())
    stale = scored.model_copy(update={"scores": dataclasses.replace(scored.scores, actionable_errors=99)})
    assert score_record(stale).scores.actionable_errors == scored.scores.actionable_errors == 2
    assert ensure_scored(stale).scores.actionable_errors == 99  # ensure_scored keeps stored scores
    assert ensure_scored(fig3_record()).scores == scored.scores


def test_a_failed_record_is_left_unscored():
    scored = score_record(fig3_record())
    failed = scored.model_copy(update={"error": "grade: judge returned invalid JSON"})
    assert score_record(failed).scores is None
    assert ensure_scored(failed.model_copy(update={"scores": None})).scores is None


def test_a_missing_stage_without_an_error_names_the_pair_and_the_stage():
    rec = fig3_record("study-7")
    rec = rec.model_copy(update={"stages": rec.stages.model_copy(update={"matching": None})})
    with pytest.raises(ValueError, match=r"pair 'study-7': stage matching is missing"):
        score_record(rec)


def test_each_sample_is_scored_and_a_sample_missing_a_stage_is_named():
    rec = fig3_record("study-8")
    ok = score_record(rec.model_copy(update={"samples": [
        Sample(index=1, stages=rec.stages), Sample(index=2, error="judge down")]}))
    assert ok.samples[0].scores == ok.scores and ok.samples[1].scores is None
    assert ok.stability.actionable_errors == [2, 2, None]
    broken = rec.stages.model_copy(update={"candidate_findings": None})
    with pytest.raises(ValueError, match=r"pair 'study-8 \(sample 1\)': stage candidate_findings"):
        score_record(rec.model_copy(update={"samples": [Sample(index=1, stages=broken)]}))
