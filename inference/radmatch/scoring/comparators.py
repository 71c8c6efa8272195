"""Deterministic comparators of a matched unit (SCORING.md section 4).

Status and comparison are compared per row; measurements are pooled per unit and
paired by an optimal assignment within one category and unit family.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, NamedTuple, Optional

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


class Value(NamedTuple):
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


@lru_cache(maxsize=1024)
def normalise_unit(unit: Optional[str]) -> Optional[str]:
    if unit is None:
        return None
    key = unit.strip().lower()
    if not key:
        return None
    return UNIT_SYNONYMS.get(key, key)


def _raw(measurements: Iterable[Measurement]) -> list[tuple[str, Optional[str], float]]:
    return [(m.category, normalise_unit(m.unit), float(m.value)) for m in measurements if not m.prior]


def normalise(
    ref: Iterable[Measurement], cand: Iterable[Measurement]
) -> tuple[list[Value], list[Value]]:
    """Rules 1-2: synonyms, null units adopted per category, pct/fraction, sizes to mm.

    Prior values are left out. Null-unit adoption looks at both sides of the unit
    together, per category.
    """
    return _normalise(_raw(ref), _raw(cand))


def _normalise(*sides: list[tuple[str, Optional[str], float]]) -> tuple[list[Value], list[Value]]:
    units_of: dict[str, set[Optional[str]]] = {}
    for side in sides:
        for cat, unit, _ in side:
            units_of.setdefault(cat, set()).add(unit)
    adopt: dict[str, Optional[str]] = {}
    fraction_ratio = False
    for cat, units in units_of.items():
        if None not in units or len(units) != 2:  # adoption needs nulls and one named unit
            continue
        (named,) = units - {None}
        if cat == "ratio" and named == "pct":
            fraction_ratio = True
        else:
            adopt[cat] = named

    out: tuple[list[Value], list[Value]] = ([], [])
    for normalised, raw in zip(out, sides):
        for cat, unit, value in raw:
            if unit is None and cat in adopt:
                unit = adopt[cat]
            if fraction_ratio and cat == "ratio" and unit == "pct":
                unit, value = None, value / 100.0
            if cat == "size" and (unit is None or unit in TO_MM):
                value, unit = value * TO_MM[unit or "mm"], "mm"
            normalised.append(Value(value, cat, unit))
    return out


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


def _assign(
    a_vals: list[Value], b_vals: list[Value], family: tuple[str, Optional[str]]
) -> list[tuple[int, int]]:
    """Pairs (i, j) of a maximum-size assignment of least total cost (rule 4)."""
    cost = [[_pair_cost(a.value, b.value, family) for b in b_vals] for a in a_vals]
    if len(a_vals) == 1:  # the common case, without numpy's overhead
        return [(0, min(range(len(b_vals)), key=cost[0].__getitem__))]
    if len(b_vals) == 1:
        return [(min(range(len(a_vals)), key=lambda i: cost[i][0]), 0)]
    rows, cols = linear_sum_assignment(np.array(cost))
    return list(zip(rows.tolist(), cols.tolist()))


def _sort_key(v: Value) -> tuple[float, str]:
    return (v.value, v.unit or "")


def _fmt(v: Value) -> str:
    number = f"{v.value:g}"
    return f"{number} {v.unit}" if v.unit else number


def measurement_errors(
    ref: Iterable[Measurement], cand: Iterable[Measurement]
) -> list[UnitError]:
    """Pooled measurement errors of one unit (pred_id and gt_id are null)."""
    ref_raw, cand_raw = _raw(ref), _raw(cand)
    if not ref_raw and not cand_raw:
        return []
    families: dict[tuple[str, Optional[str]], tuple[list[Value], list[Value]]] = {}
    for side, values in enumerate(_normalise(ref_raw, cand_raw)):
        for v in values:
            families.setdefault(v.family, ([], []))[side].append(v)
    errors: list[UnitError] = []
    for family in sorted(families, key=lambda f: (f[0], f[1] or "")):
        a_vals, b_vals = families[family]
        # sorting makes the pairing independent of the order findings came in
        a_vals.sort(key=_sort_key)
        b_vals.sort(key=_sort_key)
        pairs = _assign(a_vals, b_vals, family) if a_vals and b_vals else []
        for i, j in pairs:
            a, b = a_vals[i].value, b_vals[j].value
            if round(abs(a - b), ROUND) != 0:
                errors.append(
                    _measurement_error(
                        "major" if is_major(a, b, family) else "minor",
                        f"{family[0]} {_fmt(a_vals[i])} -> {_fmt(b_vals[j])}",
                    )
                )
        paired_a = {i for i, _ in pairs}
        paired_b = {j for _, j in pairs}
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
