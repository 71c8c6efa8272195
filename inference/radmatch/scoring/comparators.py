"""Deterministic comparators of a matched unit (SCORING.md section 4).

Status and comparison are compared per row; measurements are pooled per unit and
paired by an optimal assignment within one category and unit family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from radmatch.schemas import Finding, Measurement
from radmatch.scoring.results import UnitError

BENIGN = frozenset({"stable", "improving", "resolved"})
ACTIVE = frozenset({"worsening", "new"})

UNIT_SYNONYMS = {
    "%": "pct",
    "percent": "pct",
    "millimeter": "mm",
    "millimeters": "mm",
    "centimeter": "cm",
    "centimeters": "cm",
}
TO_MM = {"mm": 1.0, "cm": 10.0, "m": 1000.0}
HU_BOUNDARIES = (-10.0, 10.0, 20.0)
ROUND = 6
MAJOR_TIE_BREAK = 1e-6


def status_error(pred: Finding, gt: Finding) -> Optional[UnitError]:
    """A differing clinical_status is a major status error (status inversion)."""
    if pred.clinical_status == gt.clinical_status:
        return None
    return UnitError(
        dimension="status",
        severity="major",
        source="deterministic",
        pred_id=pred.id,
        gt_id=gt.id,
        reasoning=f"status inversion: reference {gt.clinical_status}, "
        f"candidate {pred.clinical_status}",
    )


def _trajectory(value: Optional[str]) -> Optional[str]:
    if value in BENIGN:
        return "benign"
    if value in ACTIVE:
        return "active"
    return None


def comparison_error(pred: Finding, gt: Finding) -> Optional[UnitError]:
    """Major when both are set and cross benign/active; minor for any other difference."""
    if pred.comparison == gt.comparison:
        return None
    crosses = (
        pred.comparison is not None
        and gt.comparison is not None
        and _trajectory(pred.comparison) != _trajectory(gt.comparison)
    )
    return UnitError(
        dimension="comparison",
        severity="major" if crosses else "minor",
        source="deterministic",
        pred_id=pred.id,
        gt_id=gt.id,
        reasoning=f"comparison {gt.comparison or 'none'} -> {pred.comparison or 'none'}",
    )


# --------------------------------------------------------------------------- measurements


@dataclass(frozen=True)
class Value:
    """One normalised, comparable measurement value."""

    value: float
    category: str
    unit: Optional[str]

    @property
    def family(self) -> tuple[str, Optional[str]]:
        """Values pair only within one family (SCORING.md 4, measurements rule 3)."""
        if self.category in ("ratio", "count"):
            return (self.category, None)
        return (self.category, self.unit)


def normalise_unit(unit: Optional[str]) -> Optional[str]:
    if unit is None:
        return None
    key = unit.strip().lower()
    if not key:
        return None
    return UNIT_SYNONYMS.get(key, key)


def normalise(ref: Sequence[Measurement], cand: Sequence[Measurement]) -> tuple[list[Value], list[Value]]:
    """Rules 1-2: synonyms, null units adopted per category, pct/fraction, sizes to mm.

    Prior values are left out. Null-unit adoption looks at both sides of the unit
    together, per category.
    """
    sides = [
        [(m.category, normalise_unit(m.unit), float(m.value)) for m in ms if not m.prior]
        for ms in (ref, cand)
    ]
    categories = {cat for side in sides for cat, _, _ in side}
    adopt: dict[str, Optional[str]] = {}
    fraction_ratio = False
    for cat in categories:
        units = {u for side in sides for c, u, _ in side if c == cat}
        named = units - {None}
        if None in units and cat == "ratio" and named == {"pct"}:
            fraction_ratio = True
        elif None in units and len(named) == 1:
            adopt[cat] = next(iter(named))

    out: list[list[Value]] = [[], []]
    for side, values in zip(out, sides):
        for cat, unit, value in values:
            if unit is None and cat in adopt:
                unit = adopt[cat]
            if cat == "ratio" and fraction_ratio and unit == "pct":
                unit, value = None, value / 100.0
            if cat == "size" and (unit is None or unit in TO_MM):
                value, unit = value * TO_MM[unit or "mm"], "mm"
            side.append(Value(value, cat, unit))
    return out[0], out[1]


def _relative(a: float, b: float) -> float:
    return round(abs(a - b) / abs(a), ROUND) if a else float("inf")


def is_major(a: float, b: float, family: tuple[str, Optional[str]]) -> bool:
    """Major-error test for reference value a against candidate value b (rule 5 table)."""
    category, unit = family
    diff = round(abs(a - b), ROUND)
    if diff == 0:
        return False
    if category == "size" and unit == "mm":
        if a == 0:
            return diff > 2
        return _relative(a, b) > 0.20 and diff > 2
    if category == "count":
        return True
    if category == "ratio":
        return _relative(a, b) > 0.30
    if category == "attenuation" and unit == "hu":
        crosses = any((a > t) != (b > t) for t in HU_BOUNDARIES)
        return diff > 20 or crosses
    # attenuation in other units, other, and sizes in units we cannot convert
    return _relative(a, b) > 0.20


def _pair_cost(a: float, b: float, family: tuple[str, Optional[str]]) -> float:
    scale = max(abs(a), abs(b))
    cost = abs(a - b) / scale if scale else 0.0
    return cost + (MAJOR_TIE_BREAK if is_major(a, b, family) else 0.0)


def _sort_key(v: Value) -> tuple[float, str]:
    return (v.value, v.unit or "")


def _fmt(v: Value) -> str:
    number = f"{v.value:g}"
    return f"{number} {v.unit}" if v.unit else number


def measurement_errors(
    ref: Iterable[Measurement], cand: Iterable[Measurement]
) -> list[UnitError]:
    """Pooled measurement errors of one unit (pred_id and gt_id are null)."""
    ref_values, cand_values = normalise(list(ref), list(cand))
    families = sorted(
        {v.family for v in ref_values + cand_values}, key=lambda f: (f[0], f[1] or "")
    )
    errors: list[UnitError] = []
    for family in families:
        # sorting makes the pairing independent of the order findings came in
        a_vals = sorted((v for v in ref_values if v.family == family), key=_sort_key)
        b_vals = sorted((v for v in cand_values if v.family == family), key=_sort_key)
        paired_a: set[int] = set()
        paired_b: set[int] = set()
        if a_vals and b_vals:
            cost = np.array([[_pair_cost(a.value, b.value, family) for b in b_vals] for a in a_vals])
            rows, cols = linear_sum_assignment(cost)
            for i, j in zip(rows.tolist(), cols.tolist()):
                paired_a.add(i)
                paired_b.add(j)
                a, b = a_vals[i].value, b_vals[j].value
                if round(abs(a - b), ROUND) == 0:
                    continue
                errors.append(
                    _measurement_error(
                        "major" if is_major(a, b, family) else "minor",
                        f"{family[0]} {_fmt(a_vals[i])} -> {_fmt(b_vals[j])}",
                    )
                )
        for i, v in enumerate(a_vals):
            if i not in paired_a:
                errors.append(_measurement_error("major", f"{v.category} {_fmt(v)} omitted"))
        for j, v in enumerate(b_vals):
            if j not in paired_b:
                errors.append(_measurement_error("minor", f"{v.category} {_fmt(v)} added"))
    return errors


def _measurement_error(severity: str, reasoning: str) -> UnitError:
    return UnitError(
        dimension="measurement", severity=severity, source="deterministic", reasoning=reasoning
    )
