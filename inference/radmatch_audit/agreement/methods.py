"""Read one method's per-pair error counts from a records file.

Two kinds of line are understood (docs/agreement.md, "Records read"):
- a RadMatch audit record (docs/records.md): its `scores.actionable_errors`; a record
  stored without scores is scored from its stages; a failed record has no count;
- a baseline record (`"record_type": "baseline"`, written by `radmatch-audit baseline`):
  its `errors`; a failed one has `errors: null`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

BASELINE_TYPE = "baseline"


@dataclass
class MethodScores:
    """Error counts of one method (one records file), by pair_id."""

    label: str
    path: str
    errors: dict[str, float] = field(default_factory=dict)
    study_ids: dict[str, Optional[str]] = field(default_factory=dict)
    failed: int = 0
    unreadable: int = 0  # lines that are neither kind of record


def _label(kind: str, model: Optional[str]) -> str:
    return f"{kind} ({model})" if model else kind


def read_method(path: str, label: Optional[str] = None) -> MethodScores:
    """Counts of every scored line of `path`; a later line of the same pair_id wins."""
    from radmatch_audit.record_io import loads, parse_record
    from radmatch_audit.recompute import ensure_scored

    found = MethodScores(label or "", path)
    kinds: set[str] = set()
    with open(path, encoding="utf-8") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            try:
                data = loads(raw)
            except ValueError:
                found.unreadable += 1
                continue
            if not isinstance(data, dict) or "pair_id" not in data:
                found.unreadable += 1
                continue
            pid = str(data["pair_id"])
            if data.get("record_type") == BASELINE_TYPE:
                kinds.add(_label(str(data.get("method", "baseline")), (data.get("judge") or {}).get("model")))
                errors = data.get("errors")  # NaN and infinity (JSON's extensions) are no count
                if isinstance(errors, (int, float)) and not isinstance(errors, bool) and math.isfinite(errors):
                    found.errors[pid] = float(errors)
                    found.study_ids[pid] = data.get("study_id")
                else:
                    found.failed += 1
                    found.errors.pop(pid, None)
                continue
            try:
                record = ensure_scored(parse_record(raw))
            except ValueError:
                found.unreadable += 1
                continue
            kinds.add(_label("radmatch", record.judge.model or None))
            if record.scores is None:
                found.failed += 1
                found.errors.pop(pid, None)
                continue
            found.errors[pid] = float(record.scores.actionable_errors)
            found.study_ids[pid] = record.study_id
    if not found.label:
        found.label = " + ".join(sorted(kinds)) if kinds else path
    return found
