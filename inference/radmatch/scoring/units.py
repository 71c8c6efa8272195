"""Evaluation units from repaired matching (SCORING.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass, field

from radmatch.schemas import Finding
from radmatch.scoring.repair import RepairedMatching, id_key, row_key
from radmatch.scoring.results import UnitRow

TIERS_BY_RANK = ("routine", "notable", "urgent", "critical")
TIER_RANK = {tier: rank for rank, tier in enumerate(TIERS_BY_RANK)}


@dataclass(slots=True)
class DraftUnit:
    """A unit before its errors and outcome are known."""

    kind: str  # matched, mis, spu, generic
    gt_ids: list[str]
    pred_ids: list[str]
    rows: list[UnitRow] = field(default_factory=list)


def unit_tier(findings: list[Finding]) -> str:
    """The highest significance tier among the unit's findings [eq. 1]."""
    return TIERS_BY_RANK[max(TIER_RANK[f.clinical_significance] for f in findings)]


def build_units(
    repaired: RepairedMatching, gt: dict[str, Finding], pred: dict[str, Finding]
) -> list[DraftUnit]:
    """Every finding lands in exactly one unit; units come out in a canonical order:
    matched, mis, spu, generic; within a kind by first id (reference side first)."""
    strong = [r for r in repaired.rows if r.match_scope != "generic"]
    matched = []
    for rows in _components(strong):
        if len(rows) == 1:  # the common 1:1 unit, without sorting
            matched.append(DraftUnit("matched", [rows[0].gt_id], [rows[0].pred_id], rows))
        else:
            matched.append(_merged(rows))
    matched.sort(key=lambda unit: id_key(unit.gt_ids[0]))

    strong_gt = {r.gt_id for r in strong}
    strong_pred = {r.pred_id for r in strong}
    generic_gt = {r.gt_id for r in repaired.rows if r.match_scope == "generic"} - strong_gt
    generic_pred = {r.pred_id for r in repaired.rows if r.match_scope == "generic"} - strong_pred
    # a generic-covered finding is excused only when normal (section 3, ours)
    mis = list(repaired.unmatched_gt)
    spu = list(repaired.unmatched_pred)
    generic: list[DraftUnit] = []
    for gt_id in sorted(generic_gt, key=id_key):
        if gt[gt_id].clinical_status == "normal":
            generic.append(DraftUnit("generic", [gt_id], []))
        else:
            mis.append(gt_id)
    for pred_id in sorted(generic_pred, key=id_key):
        if pred[pred_id].clinical_status == "normal":
            generic.append(DraftUnit("generic", [], [pred_id]))
        else:
            spu.append(pred_id)
    mis.sort(key=id_key)
    spu.sort(key=id_key)
    return [
        *matched,
        *(DraftUnit("mis", [gt_id], []) for gt_id in mis),
        *(DraftUnit("spu", [], [pred_id]) for pred_id in spu),
        *generic,
    ]


def _components(rows: list[UnitRow]) -> list[list[UnitRow]]:
    """Connected components of the finding graph whose edges are `rows`.

    Each component is a list of rows; ids on the two sides live in separate tables,
    so a gt and a pred id can never collide. Merging moves the smaller component.
    """
    of_gt: dict[str, list[UnitRow]] = {}
    of_pred: dict[str, list[UnitRow]] = {}
    for row in rows:
        a, b = of_gt.get(row.gt_id), of_pred.get(row.pred_id)
        if a is None and b is None:
            a = of_gt[row.gt_id] = of_pred[row.pred_id] = [row]
            continue
        if a is None or b is None or a is b:
            into = a if b is None else b
            into.append(row)
            of_gt[row.gt_id] = of_pred[row.pred_id] = into
            continue
        into, moved = (a, b) if len(a) >= len(b) else (b, a)
        into.extend(moved)
        into.append(row)
        for r in moved:
            of_gt[r.gt_id] = of_pred[r.pred_id] = into
        of_gt[row.gt_id] = of_pred[row.pred_id] = into
    unique = {id(c): c for c in of_gt.values()}
    return list(unique.values())


def _merged(rows: list[UnitRow]) -> DraftUnit:
    rows.sort(key=row_key)
    return DraftUnit(
        "matched",
        sorted({r.gt_id for r in rows}, key=id_key),
        sorted({r.pred_id for r in rows}, key=id_key),
        rows,
    )


def unit_findings(
    unit: DraftUnit, gt: dict[str, Finding], pred: dict[str, Finding]
) -> list[Finding]:
    return [gt[i] for i in unit.gt_ids] + [pred[i] for i in unit.pred_ids]
