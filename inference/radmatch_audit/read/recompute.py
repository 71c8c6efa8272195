"""Re-scoring a records file: what `radmatch-audit recompute` runs on every line.

`score_record` itself is the scoring core's (`radmatch_audit.scoring.record`); it is
re-exported here, where it used to live.
"""

from __future__ import annotations

from typing import Callable, Iterable

from pydantic import ValidationError

from radmatch_audit.read.corpus import CorpusSummary
from radmatch_audit.files.record_io import BadLine, describe_error, parse_record
from radmatch_audit.scoring.record import ensure_scored, score_record

__all__ = ["ensure_scored", "recompute_lines", "score_record"]


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
