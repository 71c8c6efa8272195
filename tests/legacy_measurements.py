"""The measurement comparator without clinical quantities: steps 1-5 only, frozen.

docs/scoring.md section 4 steps 1-5 only: it never reads `quantity`. The threshold
tests score records through it to prove that a record without quantities, or with
its quantities removed, scores exactly as steps 1-5 alone would score it.

Frozen from the comparator before thresholds (commit 1f91126), with the two changes of
scoring contract 3 (2026-12-02) that concern values without a quantity, and nothing
else: the `position` category (converted to mm like sizes, never major) and an omitted
reference value being minor (a value without a quantity is never a major omission).
Those two are contract changes to steps 1-5, not to step 6, so the reference moved
with them; `tests/scripts/test_contract_changes.py` checks the old behaviour against records written
before them. Do not update it for any other change of the comparator.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Optional

import numpy as np
from scipy.optimize import linear_sum_assignment

from radmatch_audit.core.schemas import Measurement
from radmatch_audit.scoring.results import UnitError

UNIT_SYNONYMS = {
    "%": "pct",
    "percent": "pct",
    "millimeter": "mm",
    "millimeters": "mm",
    "centimeter": "cm",
    "centimeters": "cm",
}
TO_MM = {"mm": 1.0, "cm": 10.0, "m": 1000.0}
LENGTH_CATEGORIES = frozenset({"size", "position"})  # contract 3: position converts like size
HU_BOUNDARIES = (-10.0, 10.0, 20.0)
ROUND = 6
MAJOR_TIE_BREAK = 1e-6
CLEAR_MARGIN = 1e-9  # pairings whose costs differ by less are left to the general solver
UNITLESS_FAMILIES = frozenset({"ratio", "count"})  # one family whatever the unit



Family = tuple[str, Optional[str]]  # (category, unit); unit None for ratio and count
Raw = tuple[str, Optional[str], float]  # (category, synonym-mapped unit, value)
Pooled = tuple[float, Optional[str]]  # a normalised (value, unit) within one family


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
    return [(m.category, normalise_unit(m.unit), float(m.value)) for m in measurements if not m.prior]



def _normalise(ref: list[Raw], cand: list[Raw]) -> tuple[list[Raw], list[Raw]]:
    adopt, fraction_ratio = _null_unit_rules(ref, cand)
    out: tuple[list[Raw], list[Raw]] = ([], [])
    for normalised, raw in zip(out, (ref, cand)):
        for cat, unit, value in raw:
            if unit is None and cat in adopt:
                unit = adopt[cat]
            if fraction_ratio and cat == "ratio" and unit == "pct":
                unit, value = None, value / 100.0
            if cat in LENGTH_CATEGORIES and (unit is None or unit in TO_MM):
                value, unit = value * TO_MM[unit or "mm"], "mm"
            normalised.append((cat, unit, value))
    return out


def _null_unit_rules(ref: list[Raw], cand: list[Raw]) -> tuple[dict[str, str], bool]:
    """Rule 2 for null units: the unit each category adopts, and whether ratios are fractions."""
    adopt: dict[str, str] = {}
    fraction_ratio = False
    if all(unit is not None for side in (ref, cand) for _, unit, _ in side):
        return adopt, fraction_ratio  # the common case: every value has its unit
    units_of: dict[str, set[Optional[str]]] = {}
    for side in (ref, cand):
        for cat, unit, _ in side:
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
    if category == "position":  # contract 3: never major
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


def _pair_cost(a: float, b: float, family: Family) -> float:
    scale = max(abs(a), abs(b))
    cost = abs(a - b) / scale if scale else 0.0
    return cost + (MAJOR_TIE_BREAK if is_major(a, b, family) else 0.0)


def _assign(a_vals: list[float], b_vals: list[float], family: Family) -> list[tuple[int, int]]:
    """Pairs (i, j) of a maximum-size assignment of least total cost (rule 4)."""
    if len(a_vals) == 1 and len(b_vals) == 1:  # the common case: nothing to choose
        return [(0, 0)]
    cost = [[_pair_cost(a, b, family) for b in b_vals] for a in a_vals]
    if len(a_vals) == 1:  # one row or one column: the cheapest cell, without numpy
        return [(0, min(range(len(b_vals)), key=cost[0].__getitem__))]
    if len(b_vals) == 1:
        return [(min(range(len(a_vals)), key=lambda i: cost[i][0]), 0)]
    if len(a_vals) == 2 and len(b_vals) == 2:  # two pairings: take the clearly cheaper one
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
        for cat, unit, value in values:
            family = _family(cat, unit)
            pooled = families.get(family)
            if pooled is None:
                pooled = families[family] = ([], [])
            pooled[side].append((value, unit))
    errors: list[UnitError] = []
    for family in sorted(families, key=_family_key) if len(families) > 1 else families:
        _family_errors(family, *families[family], errors)
    return errors


def _family_key(family: Family) -> tuple[str, str]:
    return (family[0], family[1] or "")


def _value_key(pooled: Pooled) -> tuple[float, str]:
    return (pooled[0], pooled[1] or "")


def _fmt(pooled: Pooled) -> str:
    value, unit = pooled
    return f"{value:g} {unit}" if unit else f"{value:g}"


def _family_errors(
    family: Family, ref: list[Pooled], cand: list[Pooled], errors: list[UnitError]
) -> None:
    """Rules 4-5 within one family: pair, compare, and report the values left over."""
    # sorting (by value, then unit) makes the pairing independent of finding order
    if len(ref) > 1:
        ref.sort(key=_value_key)
    if len(cand) > 1:
        cand.sort(key=_value_key)
    category = family[0]
    pairs = _assign([v for v, _ in ref], [v for v, _ in cand], family) if ref and cand else []
    for i, j in pairs:
        a, b = ref[i][0], cand[j][0]
        if round(abs(a - b), ROUND) != 0:
            severity = "major" if is_major(a, b, family) else "minor"
            reasoning = f"{category} {_fmt(ref[i])} -> {_fmt(cand[j])}"
            errors.append(UnitError("measurement", severity, "deterministic", None, None, reasoning))
    # a value left without a partner, omitted or added, is minor (contract 3: no quantity here)
    leftovers = ((ref, "minor", "omitted"), (cand, "minor", "added"))
    for side, (values, severity, what) in enumerate(leftovers):
        if len(values) > len(pairs):
            paired = {pair[side] for pair in pairs}
            errors.extend(
                _unpaired(category, pooled, severity, what)
                for k, pooled in enumerate(values)
                if k not in paired
            )


def _unpaired(category: str, pooled: Pooled, severity: str, what: str) -> UnitError:
    return UnitError(
        "measurement", severity, "deterministic", None, None, f"{category} {_fmt(pooled)} {what}"
    )


# --------------------------------------------------------------------------- for the tests


def scored_by_legacy(record):
    """`score_record` with this comparator in place of the current one (the old rule)."""
    from unittest import mock

    from radmatch_audit.read.recompute import score_record

    with mock.patch("radmatch_audit.scoring.score.measurement_errors", measurement_errors):
        return score_record(record)


def without_quantities(record):
    """A deep copy of the record with every measurement's quantity removed."""
    stripped = record.model_copy(deep=True)
    stages = stripped.stages
    for finding in (stages.reference_findings or []) + (stages.candidate_findings or []):
        for measurement in finding.measurements:
            measurement.quantity = None
    return stripped


def has_quantities(record) -> bool:
    stages = record.stages
    findings = (stages.reference_findings or []) + (stages.candidate_findings or [])
    return any(m.quantity is not None for f in findings for m in f.measurements)
