"""Evaluation units from repaired matching (docs/scoring.md section 3)."""

from __future__ import annotations

from radmatch_audit.core.schemas import Finding
from radmatch_audit.scoring.repair import RepairedMatching, id_key, row_key
from radmatch_audit.scoring.results import Unit, UnitRow

TIERS_BY_RANK = ("routine", "notable", "urgent", "critical")
TIER_RANK = {tier: rank for rank, tier in enumerate(TIERS_BY_RANK)}


def unit_tier(findings: list[Finding]) -> str:
    """The highest significance tier among the unit's findings [eq. 1]."""
    return TIERS_BY_RANK[max(TIER_RANK[f.clinical_significance] for f in findings)]


def build_units(
    repaired: RepairedMatching, gt: dict[str, Finding], pred: dict[str, Finding]
) -> list[Unit]:
    """Every finding lands in exactly one unit; units come out in a canonical order:
    matched, mis, spu, generic; within a kind by first id (reference side first).

    Units come with their findings, rows and tier. MIS, SPU and generic units are
    complete; a matched unit's errors and outcome are for the comparators to fill in,
    and every unit's `actionable` once its outcome is known.
    """
    strong = [r for r in repaired.rows if r.match_scope != "generic"]
    matched = []
    for rows in _components(strong):
        if len(rows) == 1:  # the common 1:1 unit, without sorting
            gt_ids, pred_ids = [rows[0].gt_id], [rows[0].pred_id]
            tier = max(
                gt[gt_ids[0]].clinical_significance,
                pred[pred_ids[0]].clinical_significance,
                key=TIER_RANK.__getitem__,
            )
        else:
            rows.sort(key=row_key)
            gt_ids = sorted({r.gt_id for r in rows}, key=id_key)
            pred_ids = sorted({r.pred_id for r in rows}, key=id_key)
            tier = unit_tier([gt[i] for i in gt_ids] + [pred[i] for i in pred_ids])
        matched.append(Unit("matched", gt_ids, pred_ids, rows, None, tier, False, []))
    matched.sort(key=lambda unit: id_key(unit.gt_ids[0]))

    mis, spu = repaired.unmatched_gt, repaired.unmatched_pred  # (sorted by repair)
    generic: list[Unit] = []
    if len(strong) < len(repaired.rows):
        generic, abnormal_gt, abnormal_pred = _generic_cover(repaired.rows, strong, gt, pred)
        mis = sorted(mis + abnormal_gt, key=id_key)
        spu = sorted(spu + abnormal_pred, key=id_key)
    return [
        *matched,
        *[Unit("mis", [i], [], [], "MIS", gt[i].clinical_significance, False, []) for i in mis],
        *[Unit("spu", [], [i], [], "SPU", pred[i].clinical_significance, False, []) for i in spu],
        *generic,
    ]


def _generic_cover(
    rows: list[UnitRow], strong: list[UnitRow], gt: dict[str, Finding], pred: dict[str, Finding]
) -> tuple[list[Unit], list[str], list[str]]:
    """Findings covered by generic rows alone: generic units for the normal ones, and the
    abnormal reference and candidate ids, which are MIS and SPU (section 3, ours)."""
    generic_gt = {r.gt_id for r in rows if r.match_scope == "generic"} - {r.gt_id for r in strong}
    generic_pred = {r.pred_id for r in rows if r.match_scope == "generic"}
    generic_pred -= {r.pred_id for r in strong}
    units: list[Unit] = []
    abnormal_gt: list[str] = []
    abnormal_pred: list[str] = []
    for gt_id in sorted(generic_gt, key=id_key):
        finding = gt[gt_id]
        if finding.clinical_status == "normal":
            tier = finding.clinical_significance
            units.append(Unit("generic", [gt_id], [], [], None, tier, False, []))
        else:
            abnormal_gt.append(gt_id)
    for pred_id in sorted(generic_pred, key=id_key):
        finding = pred[pred_id]
        if finding.clinical_status == "normal":
            tier = finding.clinical_significance
            units.append(Unit("generic", [], [pred_id], [], None, tier, False, []))
        else:
            abnormal_pred.append(pred_id)
    return units, abnormal_gt, abnormal_pred


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
