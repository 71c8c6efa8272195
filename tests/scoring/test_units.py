"""scoring/units.py: one unit per connected component of the strong rows; every finding in
exactly one unit; findings seen only by generic rows are generic units when normal, else
MIS or SPU (docs/scoring.md section 3)."""

from __future__ import annotations

from builders import f

from radmatch_audit.core.scores import UnitRow
from radmatch_audit.scoring.repair import RepairedMatching
from radmatch_audit.scoring.units import build_units, unit_tier

GT = {i: f(i) for i in ("gt_1", "gt_2", "gt_3", "gt_4")}
GT["gt_5"] = f("gt_5", status="normal")
PRED = {i: f(i) for i in ("p_1", "p_2", "p_3", "p_4", "p_6")}
PRED["p_5"] = f("p_5", status="normal")


def units_of(rows, unmatched_pred=(), unmatched_gt=()):
    repaired = RepairedMatching(
        [UnitRow(p, g, scope) for p, g, scope in rows], list(unmatched_pred), list(unmatched_gt)
    )
    return build_units(repaired, GT, PRED)


def test_each_connected_component_is_one_unit_and_every_finding_is_in_exactly_one():
    # p_1-gt_1 and p_2-gt_2 start apart; p_1-gt_2 joins them into one component
    units = units_of(
        [("p_1", "gt_1", "direct"), ("p_2", "gt_2", "direct"), ("p_1", "gt_2", "aggregate"),
         ("p_3", "gt_3", "direct"), ("p_4", "gt_5", "generic"), ("p_5", "gt_5", "generic")],
        unmatched_pred=["p_6"], unmatched_gt=["gt_4"],
    )
    assert [(u.kind, u.gt_ids, u.pred_ids) for u in units] == [
        ("matched", ["gt_1", "gt_2"], ["p_1", "p_2"]),
        ("matched", ["gt_3"], ["p_3"]),
        ("mis", ["gt_4"], []),
        ("spu", [], ["p_4"]),  # abnormal, seen only by a generic row
        ("spu", [], ["p_6"]),
        ("generic", ["gt_5"], []),  # normal, seen only by generic rows
        ("generic", [], ["p_5"]),
    ]
    assert len(units[0].rows) == 3
    gt_ids = [i for u in units for i in u.gt_ids]
    pred_ids = [i for u in units for i in u.pred_ids]
    assert sorted(gt_ids) == sorted(GT) and sorted(pred_ids) == sorted(PRED)


def test_a_generic_row_beside_a_strong_one_adds_no_unit():
    units = units_of([("p_1", "gt_1", "direct"), ("p_1", "gt_5", "generic")],
                     unmatched_gt=["gt_2", "gt_3", "gt_4"], unmatched_pred=["p_2", "p_3", "p_4", "p_5", "p_6"])
    assert [u.gt_ids for u in units if u.kind == "generic"] == [["gt_5"]]
    assert sum(u.pred_ids.count("p_1") for u in units) == 1


def test_a_unit_takes_the_highest_tier_of_its_findings():
    assert unit_tier([f("a", sig="notable"), f("b", sig="critical"), f("c")]) == "critical"
    gt = {"gt_1": f("gt_1", sig="routine")}
    pred = {"p_1": f("p_1", sig="urgent")}
    (unit,) = build_units(RepairedMatching([UnitRow("p_1", "gt_1", "direct")], [], []), gt, pred)
    assert unit.tier == "urgent"
