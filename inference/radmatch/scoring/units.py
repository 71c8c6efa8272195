"""Evaluation units from repaired matching (SCORING.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from radmatch.schemas import Finding
from radmatch.scoring.repair import RepairedMatching, id_key, row_key
from radmatch.scoring.results import UnitRow

TIERS_BY_RANK = ("routine", "notable", "urgent", "critical")
TIER_RANK = {tier: rank for rank, tier in enumerate(TIERS_BY_RANK)}


@dataclass
class DraftUnit:
    """A unit before its errors and outcome are known."""

    kind: str  # matched, mis, spu, generic
    gt_ids: list[str]
    pred_ids: list[str]
    rows: list[UnitRow] = field(default_factory=list)

    def sort_key(self) -> tuple:
        first = self.gt_ids[0] if self.gt_ids else self.pred_ids[0]
        side = 0 if self.gt_ids else 1
        return (("matched", "mis", "spu", "generic").index(self.kind), side, id_key(first))


def unit_tier(findings: list[Finding]) -> str:
    """The highest significance tier among the unit's findings [eq. 1]."""
    return TIERS_BY_RANK[max(TIER_RANK[f.clinical_significance] for f in findings)]


def build_units(
    repaired: RepairedMatching, gt: dict[str, Finding], pred: dict[str, Finding]
) -> list[DraftUnit]:
    """Every finding lands in exactly one unit; units come out in a canonical order."""
    strong = [r for r in repaired.rows if r.match_scope != "generic"]
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        root = node
        while parent.get(root, root) != root:
            root = parent[root]
        parent[node] = root
        return root

    def union(a: str, b: str) -> None:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    # node names carry the side so that a gt and a pred id can never collide
    for row in strong:
        union("g:" + row.gt_id, "p:" + row.pred_id)

    components: dict[str, DraftUnit] = {}
    for row in strong:
        unit = components.setdefault(find("g:" + row.gt_id), DraftUnit("matched", [], []))
        unit.rows.append(row)
    units: list[DraftUnit] = []
    for unit in components.values():
        unit.gt_ids = sorted({r.gt_id for r in unit.rows}, key=id_key)
        unit.pred_ids = sorted({r.pred_id for r in unit.rows}, key=id_key)
        unit.rows.sort(key=row_key)
        units.append(unit)

    strong_gt = {r.gt_id for r in strong}
    strong_pred = {r.pred_id for r in strong}
    generic_gt = {r.gt_id for r in repaired.rows if r.match_scope == "generic"} - strong_gt
    generic_pred = {r.pred_id for r in repaired.rows if r.match_scope == "generic"} - strong_pred

    for gt_id in generic_gt:
        kind = "generic" if gt[gt_id].clinical_status == "normal" else "mis"
        units.append(DraftUnit(kind, [gt_id], []))
    for pred_id in generic_pred:
        kind = "generic" if pred[pred_id].clinical_status == "normal" else "spu"
        units.append(DraftUnit(kind, [], [pred_id]))
    units.extend(DraftUnit("mis", [gt_id], []) for gt_id in repaired.unmatched_gt)
    units.extend(DraftUnit("spu", [], [pred_id]) for pred_id in repaired.unmatched_pred)
    units.sort(key=DraftUnit.sort_key)
    return units


def unit_findings(
    unit: DraftUnit, gt: dict[str, Finding], pred: dict[str, Finding]
) -> list[Finding]:
    return [gt[i] for i in unit.gt_ids] + [pred[i] for i in unit.pred_ids]

