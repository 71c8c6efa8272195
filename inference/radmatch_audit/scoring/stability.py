"""Score stability over samples of the judge (`radmatch-audit evaluate --samples K`).

Each sample extracts its own findings, so a unit is known across samples by the text
of its findings: the reference findings' text for a unit that has any, else the
candidate findings' (a spurious unit). Texts are compared lower-cased with spaces
collapsed. A unit's majority outcome is the one more than half the scored samples
give it; a unit that most samples do not have, or split between outcomes, has none.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from radmatch_audit.core.records import Record, Stability, Stages, UnitVote
from radmatch_audit.core.scores import Scores


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def unit_outcomes(stages: Stages, scores: Scores) -> dict[tuple[str, str], str]:
    """(side, unit text) -> outcome, for one sample's scored units."""
    text = {f.id: _normal(f.text) for f in (stages.reference_findings or []) + (stages.candidate_findings or [])}
    found: dict[tuple[str, str], str] = {}
    for unit in scores.units:
        side, ids = ("reference", unit.gt_ids) if unit.gt_ids else ("candidate", unit.pred_ids)
        key = (side, " + ".join(sorted(text.get(i, i) for i in ids)))
        found.setdefault(key, unit.outcome or unit.kind)
    return found


def stability(record: Record) -> Optional[Stability]:
    """The stability of a sampled record (None for a record of one sample)."""
    if record.samples is None:
        return None
    runs: list[tuple[Stages, Optional[Scores]]] = [(record.stages, record.scores)]
    runs += [(s.stages, s.scores) for s in record.samples]
    counts = [scores.actionable_errors if scores is not None else None for _, scores in runs]
    scored = [(stages, scores) for stages, scores in runs if scores is not None]
    values = [c for c in counts if c is not None]
    per_sample = [unit_outcomes(stages, scores) for stages, scores in scored]
    votes = []
    for key in sorted({k for outcomes in per_sample for k in outcomes}):
        outcomes = [o.get(key) for o in per_sample]
        top, n = Counter(outcomes).most_common(1)[0]
        votes.append(UnitVote(
            unit=key[1], side=key[0], outcomes=outcomes,
            majority=top if top is not None and n * 2 > len(per_sample) else None,
        ))
    return Stability(
        samples=len(runs),
        scored=len(scored),
        actionable_errors=counts,
        spread=max(values) - min(values) if values else None,
        identical=len(values) == len(runs) and len(set(values)) == 1 if values else None,
        units=votes,
    )
