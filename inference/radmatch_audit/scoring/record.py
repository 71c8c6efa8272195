"""Scoring a record: its stored stage answers in, its scores and repairs re-derived.

Pure like the rest of the core (no I/O, no judge): the run loop scores each pair with
it as it finishes, `radmatch-audit recompute` every stored line, and the readers of
records (`radmatch_audit.read.reading`) a record stored without scores.
"""

from __future__ import annotations

from radmatch_audit.core.records import Record, Sample, Stages
from radmatch_audit.core.scores import Scores
from radmatch_audit.scoring.score import score_pair
from radmatch_audit.scoring.stability import stability

REQUIRED_STAGES = ("reference_findings", "candidate_findings", "matching")


def score_record(record: Record) -> Record:
    """Return a copy of the record with `scores` and `repairs` re-derived from its stages.

    A failed record (`error` set) is returned unscored: it is never scored as clean. A
    sampled record (`--samples K`) has every sample re-scored and its stability re-derived.
    """
    if record.error is not None:
        update: dict = {"scores": None}
    else:
        scores, repairs = _score_stages(record.pair_id, record.stages, record)
        update = {"scores": scores, "repairs": repairs}
    if record.samples is not None:
        update["samples"] = [_score_sample(record, sample) for sample in record.samples]
    scored = record.model_copy(update=update)
    if scored.samples is not None:
        scored.stability = stability(scored)
    return scored


def _score_sample(record: Record, sample: Sample) -> Sample:
    if sample.error is not None:
        return sample.model_copy(update={"scores": None})
    name = f"{record.pair_id} (sample {sample.index})"
    scores, repairs = _score_stages(name, sample.stages, record)
    return sample.model_copy(update={"scores": scores, "repairs": repairs})


def _score_stages(name: str, stages: Stages, record: Record) -> tuple[Scores, list[str]]:
    missing = [stage for stage in REQUIRED_STAGES if getattr(stages, stage) is None]
    if missing:
        raise ValueError(
            f"pair {name!r}: stage {', '.join(missing)} is missing and 'error' "
            "is not set; a record without its stages cannot be scored"
        )
    return score_pair(
        stages.reference_findings,
        stages.candidate_findings,
        stages.matching,
        stages.grading,
        reference_text=record.reference,
        candidate_text=record.candidate,
        adjudication=stages.adjudication,
    )


def ensure_scored(record: Record) -> Record:
    """The record as stored, or scored from its stages when it has no scores yet."""
    if record.scores is None and record.error is None:
        return score_record(record)
    return record
