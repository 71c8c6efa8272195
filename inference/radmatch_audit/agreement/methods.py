"""Read one method's per-pair error counts from a records file.

Two kinds of line are understood (docs/agreement.md, "Records read"):
- a RadMatch audit record (docs/records.md): its `scores.actionable_errors` (the paper's
  RadMatch count) and, as a second method, its `scores.significant_errors` (the error
  adjudication's count, where the adjudication stands); a record stored without scores
  is scored from its stages; a failed record has no count;
- a baseline record (`"record_type": "baseline"`, written by `radmatch-audit baseline`):
  its `errors`; a failed one has `errors: null`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

BASELINE_TYPE = "baseline"
SIGNIFICANT = "-significant"  # what names a file's significant-error method beside its label


@dataclass
class MethodScores:
    """Error counts of one method (one records file), by pair_id."""

    label: str
    path: str
    errors: dict[str, float] = field(default_factory=dict)
    study_ids: dict[str, Optional[str]] = field(default_factory=dict)
    failed: int = 0
    unreadable: int = 0  # lines that are neither kind of record
    notes: list[str] = field(default_factory=list)
    # the RadMatch records' significant errors, by pair_id (None when the file has no
    # RadMatch record); a pair whose adjudication does not stand is counted in `failed`
    significant: Optional["MethodScores"] = None


def _label(kind: str, model: Optional[str]) -> str:
    return f"{kind} ({model})" if model else kind


def read_method(path: str, label: Optional[str] = None) -> MethodScores:
    """Counts of every scored line of `path`; a later line of the same pair_id wins.

    Audit records are read by the one reader of records (`radmatch_audit.read.reading`: a
    record stored without scores is scored from its stages); baseline records, which
    carry their count as written, are counted on the way to it.
    """
    from radmatch_audit.read.reading import RecordReader

    found = MethodScores(label or "", path)
    kinds: set[str] = set()
    significant = MethodScores("", path)
    with open(path, encoding="utf-8") as handle:
        records = RecordReader(_counting_baselines(handle, found, kinds))
        for record in records:
            kinds.add(_label("radmatch", record.judge.model or None))
            scores = record.scores
            _count(found, record.pair_id, record.study_id, scores.actionable_errors if scores else None)
            _count(significant, record.pair_id, record.study_id,
                   scores.significant_errors if scores and scores.adjudication == "current" else None)
            found.significant = significant
    found.unreadable += len(records.bad)
    if not found.label:
        found.label = " + ".join(sorted(kinds)) if kinds else path
    return found


def read_methods(path: str, label: Optional[str] = None) -> list[MethodScores]:
    """The methods of one records file: for RadMatch records whose error adjudication
    stands for some pair, their significant errors first (the headline count), then
    their actionable errors; otherwise the one count the file holds, with a note."""
    found = read_method(path, label)
    significant = found.significant
    if significant is None:  # baseline records only
        return [found]
    if not significant.errors:
        found.notes.append(f"{found.label}: no pair's error adjudication stands (records written "
                           "before it, or evaluated with --no-adjudication): significant errors "
                           "are not available")
        return [found]
    significant.label = _significant_label(found.label)
    left_out = significant.failed - found.failed
    if left_out:
        significant.notes.append(
            f"{significant.label}: {left_out} scored pair(s) whose error adjudication does not "
            "stand (failed, stale or not run) have no significant count and are counted as failed")
    return [significant, found]


def _significant_label(label: str) -> str:
    """'radmatch (model)' -> 'radmatch-significant (model)'; any other label gains the suffix."""
    kind, sep, rest = label.partition(" (")
    return f"{kind}{SIGNIFICANT}{sep}{rest}"


def _counting_baselines(lines: Iterable[str], found: MethodScores, kinds: set[str]) -> Iterator[str]:
    """The lines that are not baseline records; each baseline record is counted in `found`."""
    from radmatch_audit.files.record_io import loads

    for raw in lines:
        data = None
        if '"record_type"' in raw:  # (an audit record has no such key: it is parsed once, by the reader)
            try:
                data = loads(raw)
            except ValueError:
                pass
        if not (isinstance(data, dict) and "pair_id" in data and data.get("record_type") == BASELINE_TYPE):
            yield raw
            continue
        kinds.add(_label(str(data.get("method", "baseline")), (data.get("judge") or {}).get("model")))
        errors = data.get("errors")  # NaN and infinity (JSON's extensions) are no count
        finite = isinstance(errors, (int, float)) and not isinstance(errors, bool) and math.isfinite(errors)
        _count(found, str(data["pair_id"]), data.get("study_id"), errors if finite else None)


def _count(found: MethodScores, pair_id: str, study_id: Optional[str], errors: Optional[float]) -> None:
    if errors is None:  # a failed pair has no count
        found.failed += 1
        found.errors.pop(pair_id, None)
    else:
        found.errors[pair_id] = float(errors)
        found.study_ids[pair_id] = study_id
