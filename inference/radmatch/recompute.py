"""Scoring a stored record: what `radmatch recompute` runs on every line."""

from __future__ import annotations

from typing import Callable, Iterable

from pydantic import ValidationError

from radmatch.corpus import CorpusSummary
from radmatch.record_io import BadLine, describe_error, parse_record
from radmatch.records import Record
from radmatch.scoring.score import score_pair

REQUIRED_STAGES = ("reference_findings", "candidate_findings", "matching")


def score_record(record: Record) -> Record:
    """Return a copy of the record with `scores` and `repairs` re-derived from its stages.

    A failed record (`error` set) is returned unscored: it is never scored as clean.
    """
    if record.error is not None:
        return record.model_copy(update={"scores": None})
    missing = [name for name in REQUIRED_STAGES if getattr(record.stages, name) is None]
    if missing:
        raise ValueError(
            f"pair {record.pair_id!r}: stage {', '.join(missing)} is missing and 'error' "
            "is not set; a record without its stages cannot be scored"
        )
    stages = record.stages
    scores, repairs = score_pair(
        stages.reference_findings,
        stages.candidate_findings,
        stages.matching,
        stages.grading,
        reference_text=record.reference,
        candidate_text=record.candidate,
    )
    return record.model_copy(update={"scores": scores, "repairs": repairs})


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
