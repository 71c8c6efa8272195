"""Deterministic comparators of a matched unit (docs/scoring.md section 4).

Status and comparison are compared per row; measurements are pooled per unit and
paired by an optimal assignment within one category and unit family. A pair whose
values share a clinical quantity and lie either side of one of its thresholds
(radmatch_audit.core.thresholds, each with its side) is a major error (rule 6). Rule numbers are
the steps of the measurement part of docs/scoring.md section 4.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, NamedTuple, Optional

import numpy as np
from scipy.optimize import linear_sum_assignment

from radmatch_audit.core.schemas import Finding, Measurement
from radmatch_audit.scoring.results import UnitError
from radmatch_audit.core.thresholds import CLINICAL_THRESHOLDS, ClinicalQuantity

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
# categories converted to mm (rule 2): sizes, and device tip-to-landmark distances
LENGTH_CATEGORIES = frozenset({"size", "position"})
HU_BOUNDARIES = (-10.0, 10.0, 20.0)
ROUND = 6
MAJOR_TIE_BREAK = 1e-6
CLEAR_MARGIN = 1e-9  # pairings whose costs differ by less are left to the general solver
UNITLESS_FAMILIES = frozenset({"ratio", "count"})  # one family whatever the unit


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

Family = tuple[str, Optional[str]]  # (category, unit); unit None for ratio and count
# (category, synonym-mapped unit, value, quantity)
Raw = tuple[str, Optional[str], float, Optional[str]]
# a normalised (value, unit, quantity) within one family
Pooled = tuple[float, Optional[str], Optional[str]]


class Value(NamedTuple):
    """One normalised, comparable measurement value."""

    value: float
    category: str
    unit: Optional[str]
    quantity: Optional[str] = None

    @property
    def family(self) -> Family:
        """Values pair only within one family (docs/scoring.md 4, measurements rule 3)."""
        return _family(self.category, self.unit)


def _family(category: str, unit: Optional[str]) -> Family:
    return (category, None if category in UNITLESS_FAMILIES else unit)


@lru_cache(maxsize=1024)
def normalise_unit(unit: Optional[str]) -> Optional[str]:
    if unit is None:
        return None
    key = unit.strip().lower()
    if not key:
        return None
    return UNIT_SYNONYMS.get(key, key)


def _raw(measurements: Iterable[Measurement]) -> list[Raw]:
    """Rule 1 (synonyms, lower case); prior values are left out."""
    return [
        (m.category, normalise_unit(m.unit), float(m.value), m.quantity)
        for m in measurements
        if not m.prior
    ]


def normalise(
    ref: Iterable[Measurement], cand: Iterable[Measurement]
) -> tuple[list[Value], list[Value]]:
    """Rules 1-2: synonyms, null units adopted per category, pct/fraction, sizes to mm.

    Prior values are left out. Null-unit adoption looks at both sides of the unit
    together, per category.
    """
    sides = (_raw(ref), _raw(cand))
    ref_values, cand_values = (
        [Value(value, cat, unit, quantity) for cat, unit, value, quantity in side]
        for side in _normalise(*sides)
    )
    return ref_values, cand_values


def _normalise(ref: list[Raw], cand: list[Raw]) -> tuple[list[Raw], list[Raw]]:
    adopt, fraction_ratio = _null_unit_rules(ref, cand)
    out: tuple[list[Raw], list[Raw]] = ([], [])
    for normalised, raw in zip(out, (ref, cand)):
        for cat, unit, value, quantity in raw:
            if unit is None and cat in adopt:
                unit = adopt[cat]
            if fraction_ratio and cat == "ratio" and unit == "pct":
                unit, value = None, value / 100.0
            if cat in LENGTH_CATEGORIES and (unit is None or unit in TO_MM):
                value, unit = value * TO_MM[unit or "mm"], "mm"
            normalised.append((cat, unit, value, quantity))
    return out


def _null_unit_rules(ref: list[Raw], cand: list[Raw]) -> tuple[dict[str, str], bool]:
    """Rule 2 for null units: the unit each category adopts, and whether ratios are fractions."""
    adopt: dict[str, str] = {}
    fraction_ratio = False
    if all(raw[1] is not None for side in (ref, cand) for raw in side):
        return adopt, fraction_ratio  # the common case: every value has its unit
    units_of: dict[str, set[Optional[str]]] = {}
    for side in (ref, cand):
        for cat, unit, _, _ in side:
            units_of.setdefault(cat, set()).add(unit)
    for cat, units in units_of.items():
        if None not in units or len(units) != 2:  # adoption needs nulls and one named unit
            continue
        (named,) = units - {None}
        if cat == "ratio" and named == "pct":
            fraction_ratio = True
        else:
            adopt[cat] = named
    return adopt, fraction_ratio


def _relative(a: float, b: float) -> float:
    return round(abs(a - b) / abs(a), ROUND) if a else float("inf")


def is_major(a: float, b: float, family: Family) -> bool:
    """Major-error test for reference value a against candidate value b (rule 5 table)."""
    category, unit = family
    diff = round(abs(a - b), ROUND)
    if diff == 0:
        return False
    if category == "position":  # never major, in mm or any other unit (ours, 2026-12-02)
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


# ----------------------------------------------------------------- clinical thresholds (rule 6)


# quantity -> (its category, whether it is in mm (else a fraction), its table row)
_LIMITS = {
    quantity: (spec.category, spec.unit == "mm", spec)
    for quantity, spec in CLINICAL_THRESHOLDS.items()
}


def _in_quantity_unit(value: float, unit: Optional[str], in_mm: bool) -> Optional[float]:
    """The value in mm or as a fraction, or None when its unit has no threshold.

    Rule 2 has already converted sizes in mm, cm, m or null to mm; a ratio with no
    unit is a fraction and one in pct is divided by 100.
    """
    if in_mm:
        return value if unit == "mm" else None
    if unit is None:
        return value
    return value / 100.0 if unit == "pct" else None


def crossed_thresholds(a: Pooled, b: Pooled, category: str) -> tuple[float, ...]:
    """The thresholds of their shared quantity that reference a and candidate b lie either side of.

    Empty unless both carry the same quantity, are of its category and convert to its
    unit. Values are rounded like differences (rule 5), so 2.9 cm is exactly 29 mm, and
    a value equal to a threshold lies on the side the table gives it (>= or >).
    """
    quantity = a[2]
    if quantity is None or quantity != b[2]:
        return ()
    quantity_category, in_mm, spec = _LIMITS[quantity]
    if category != quantity_category:
        return ()
    x = _in_quantity_unit(a[0], a[1], in_mm)
    y = _in_quantity_unit(b[0], b[1], in_mm)
    if x is None or y is None:
        return ()
    return tuple([t for t in spec.thresholds if _above(spec, x, t) != _above(spec, y, t)])


def _above(spec: ClinicalQuantity, value: float, threshold: float) -> bool:
    """Whether round(value, 6) lies above the threshold by its side, rounding only near it
    (round is slow, and far from the threshold the side makes no difference)."""
    if abs(value - threshold) > 1e-6:
        return value > threshold
    return spec.is_above(round(value, ROUND), threshold)


def _is_major_pair(a: Pooled, b: Pooled, family: Family) -> bool:
    """Rule 5, or rule 6 when it applies; equal values are never an error."""
    if a[2] is None or a[2] != b[2]:  # the common case: no shared quantity
        return is_major(a[0], b[0], family)
    if is_major(a[0], b[0], family):
        return True
    return round(abs(a[0] - b[0]), ROUND) != 0 and bool(crossed_thresholds(a, b, family[0]))


@lru_cache(maxsize=256)
def _threshold_note(quantity: str, crossed: tuple[float, ...]) -> str:
    """': ascending_aorta_diameter crosses >= 55 mm (surgical repair threshold)'.

    The side tells a reader where a value equal to the threshold lies (rule 6).
    """
    spec = CLINICAL_THRESHOLDS[quantity]
    suffix = " mm" if spec.unit == "mm" else ""
    meaning = dict(zip(spec.thresholds, spec.meanings))
    side = dict(zip(spec.thresholds, spec.sides))
    named = [f"{side[t]} {t:g}{suffix} ({meaning[t]})" for t in crossed]
    return f": {quantity} crosses " + " and ".join(named)


# ----------------------------------------------------------------- pairing and comparison


def _pair_cost(a: Pooled, b: Pooled, family: Family) -> float:
    x, y = a[0], b[0]
    scale = max(abs(x), abs(y))
    cost = abs(x - y) / scale if scale else 0.0
    return cost + (MAJOR_TIE_BREAK if _is_major_pair(a, b, family) else 0.0)


def _assign(ref: list[Pooled], cand: list[Pooled], family: Family) -> list[tuple[int, int]]:
    """Pairs (i, j) of a maximum-size assignment of least total cost (rule 4)."""
    if len(ref) == 1 and len(cand) == 1:  # the common case: nothing to choose
        return [(0, 0)]
    cost = [[_pair_cost(a, b, family) for b in cand] for a in ref]
    if len(ref) == 1:  # one row or one column: the cheapest cell, without numpy
        return [(0, min(range(len(cand)), key=cost[0].__getitem__))]
    if len(cand) == 1:
        return [(min(range(len(ref)), key=lambda i: cost[i][0]), 0)]
    if len(ref) == 2 and len(cand) == 2:  # two pairings: take the clearly cheaper one
        straight, crossed = cost[0][0] + cost[1][1], cost[0][1] + cost[1][0]
        if abs(straight - crossed) > CLEAR_MARGIN:  # (a near tie is scipy's to break)
            return [(0, 0), (1, 1)] if straight < crossed else [(0, 1), (1, 0)]
    rows, cols = linear_sum_assignment(np.array(cost))
    return list(zip(rows.tolist(), cols.tolist()))


def measurement_errors(
    ref: Iterable[Measurement], cand: Iterable[Measurement]
) -> list[UnitError]:
    """Pooled measurement errors of one unit (pred_id and gt_id are null)."""
    ref_raw, cand_raw = _raw(ref), _raw(cand)
    if ref_raw == cand_raw:  # the same values on both sides (or none): every pair is equal
        return []
    families: dict[Family, tuple[list[Pooled], list[Pooled]]] = {}
    for side, values in enumerate(_normalise(ref_raw, cand_raw)):
        for cat, unit, value, quantity in values:
            family = _family(cat, unit)
            pooled = families.get(family)
            if pooled is None:
                pooled = families[family] = ([], [])
            pooled[side].append((value, unit, quantity))
    errors: list[UnitError] = []
    for family in sorted(families, key=_family_key) if len(families) > 1 else families:
        _family_errors(family, *families[family], errors)
    return errors


def _family_key(family: Family) -> tuple[str, str]:
    return (family[0], family[1] or "")


def _value_key(pooled: Pooled) -> tuple[float, str, str]:
    return (pooled[0], pooled[1] or "", pooled[2] or "")


def _fmt(pooled: Pooled) -> str:
    value, unit = pooled[0], pooled[1]
    return f"{value:g} {unit}" if unit else f"{value:g}"


def _family_errors(
    family: Family, ref: list[Pooled], cand: list[Pooled], errors: list[UnitError]
) -> None:
    """Rules 4-6 within one family: pair, compare, and report the values left over."""
    # sorting (by value, unit, quantity) makes the pairing independent of finding order
    if len(ref) > 1:
        ref.sort(key=_value_key)
    if len(cand) > 1:
        cand.sort(key=_value_key)
    category = family[0]
    pairs = _assign(ref, cand, family) if ref and cand else []
    for i, j in pairs:
        a, b = ref[i], cand[j]
        if round(abs(a[0] - b[0]), ROUND) != 0:
            errors.append(_pair_error(a, b, family))
    # Rule 5, values left without a partner: a reference value is omitted, major only when
    # it carries a quantity (ours, 2026-12-02); a candidate value is added, always minor.
    for side, (values, what) in enumerate(((ref, "omitted"), (cand, "added"))):
        if len(values) > len(pairs):
            paired = {pair[side] for pair in pairs}
            errors.extend(
                _unpaired(category, pooled, what)
                for k, pooled in enumerate(values)
                if k not in paired
            )


def _pair_error(a: Pooled, b: Pooled, family: Family) -> UnitError:
    """The error of two different paired values; a crossed clinical threshold is named."""
    category = family[0]
    reasoning = f"{category} {_fmt(a)} -> {_fmt(b)}"
    crossed = crossed_thresholds(a, b, category) if a[2] is not None else ()
    if crossed:
        reasoning += _threshold_note(a[2], crossed)
    major = bool(crossed) or is_major(a[0], b[0], family)
    return UnitError(
        "measurement", "major" if major else "minor", "deterministic", None, None, reasoning
    )


def _unpaired(category: str, pooled: Pooled, what: str) -> UnitError:
    """'size 12 mm omitted' (minor), 'size 56 mm omitted: ascending_aorta_diameter' (major).

    A position value is never major, omitted or not (rule 5 table; a device's position is
    its own finding, section 1): no quantity of rule 6 is a position, so one that carries
    a quantity is mislabelled.
    """
    quantity = pooled[2]
    major = what == "omitted" and quantity is not None and category != "position"
    reasoning = f"{category} {_fmt(pooled)} {what}"
    if major:
        reasoning += f": {quantity}"
    return UnitError(
        "measurement", "major" if major else "minor", "deterministic", None, None, reasoning
    )
