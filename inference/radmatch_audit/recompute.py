"""Scoring a stored record: what `radmatch-audit recompute` runs on every line."""

from __future__ import annotations

from typing import Callable, Iterable

from pydantic import ValidationError

from radmatch_audit.corpus import CorpusSummary
from radmatch_audit.record_io import BadLine, describe_error, parse_record
from radmatch_audit.records import Record, Sample, Stages
from radmatch_audit.scoring.results import Scores
from radmatch_audit.scoring.score import score_pair
from radmatch_audit.stability import stability

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
    )


def ensure_scored(record: Record) -> Record:
    """The record as stored, or scored from its stages when it has no scores yet."""
    if record.scores is None and record.error is None:
        return score_record(record)
    return record


def recompute_lines(
    lines: Iterable[str], write: Callable[[str], None], summary: CorpusSummary
) -> list[BadLine]:
    """Re-score each JSONL line, write it out, fold it into `summary`.

    A line that cannot be read or scored is written through unchanged (nothing is
    lost) and returned as a BadLine naming the line and the field at fault.
    """
    bad: list[BadLine] = []
    for line_no, raw in enumerate(lines, 1):
        if not raw or raw.isspace():  # (unlike strip, isspace copies no 20 kB line)
            continue
        try:  # stored scores are about to be re-derived: not worth reading
            record = score_record(parse_record(raw, ignore_scores=True))
        except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
            bad.append(BadLine(line_no, describe_error(exc), raw))
            write(raw if raw.endswith("\n") else raw + "\n")
            continue
        summary.add(record)
        write(record.to_json() + "\n")
    return bad
