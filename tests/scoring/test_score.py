"""docs/scoring.md sections 2, 3 and 5: repairs, units, outcomes, tiers and pair scores."""

import pytest

from builders import f, fig3_record, grading, m, matching, mq, pos, record, row, spu_record
from radmatch_audit.read.recompute import score_record
from radmatch_audit.core.schemas import GradingStage
from radmatch_audit.scoring import score_pair
from radmatch_audit.scoring.repair import repair_matching


def score(gt, pred, match, grade=None, reference="", candidate=""):
    return score_pair(gt, pred, match, grade, reference_text=reference, candidate_text=candidate)


def units_by_kind(scores):
    return [(u.kind, u.gt_ids, u.pred_ids, u.outcome) for u in scores.units]


# --------------------------------------------------------------------------- repair rules


def test_rule1_rows_with_unknown_ids_are_dropped():
    rep = repair_matching(matching([row("p_1", "gt_1"), row("p_9", "gt_1")]), ["p_1"], ["gt_1"])
    assert [(r.pred_id, r.gt_id) for r in rep.rows] == [("p_1", "gt_1")]
    assert any("unknown id p_9" in r for r in rep.repairs)


def test_rule1_duplicates_collapse_keeping_strongest_scope():
    rows = [row("p_1", "gt_1", "generic"), row("p_1", "gt_1", "direct"), row("p_1", "gt_1", "aggregate")]
    rep = repair_matching(matching(rows), ["p_1"], ["gt_1"])
    assert [(r.pred_id, r.gt_id, r.match_scope) for r in rep.rows] == [("p_1", "gt_1", "direct")]
    assert rep.repairs == ["collapsed 3 rows p_1-gt_1 (direct, aggregate, generic) into direct"]


def test_rule2_id_in_row_and_unmatched_list_is_removed_from_the_list():
    rep = repair_matching(
        matching([row("p_1", "gt_1")], unmatched_pred=["p_1"], unmatched_gt=["gt_1"]),
        ["p_1"],
        ["gt_1"],
    )
    assert rep.unmatched_pred == [] and rep.unmatched_gt == []
    assert sum("it is in a match row" in r for r in rep.repairs) == 2


def test_rule2_id_in_neither_becomes_unmatched():
    rep = repair_matching(matching([]), ["p_1", "p_2"], ["gt_1"])
    assert rep.unmatched_pred == ["p_1", "p_2"] and rep.unmatched_gt == ["gt_1"]
    assert len(rep.repairs) == 3


def test_unknown_and_duplicate_ids_in_unmatched_lists_are_repaired():
    rep = repair_matching(matching([], unmatched_pred=["p_1", "p_1", "p_7"]), ["p_1"], [])
    assert rep.unmatched_pred == ["p_1"]
    assert any("unknown id p_7" in r for r in rep.repairs)
    assert any("duplicate p_1" in r for r in rep.repairs)


def test_rule3_one_to_one_aggregate_becomes_direct():
    rep = repair_matching(matching([row("p_1", "gt_1", "aggregate")]), ["p_1"], ["gt_1"])
    assert rep.rows[0].match_scope == "direct"
    assert any("aggregate -> direct" in r for r in rep.repairs)


def test_rule3_one_to_one_generic_is_dropped_and_both_unmatched():
    rep = repair_matching(matching([row("p_1", "gt_1", "generic")]), ["p_1"], ["gt_1"])
    assert rep.rows == [] and rep.unmatched_pred == ["p_1"] and rep.unmatched_gt == ["gt_1"]
    assert any("generic is never 1:1" in r for r in rep.repairs)


def test_rule3_direct_in_one_to_many_becomes_aggregate():
    rows = [row("p_1", "gt_1", "direct"), row("p_1", "gt_2", "aggregate")]
    rep = repair_matching(matching(rows), ["p_1"], ["gt_1", "gt_2"])
    assert {r.match_scope for r in rep.rows} == {"aggregate"}
    assert any("direct -> aggregate" in r for r in rep.repairs)


def test_clean_matching_needs_no_repair():
    rep = repair_matching(
        matching([row("p_1", "gt_1")], unmatched_pred=["p_2"], unmatched_gt=[]), ["p_1", "p_2"], ["gt_1"]
    )
    assert rep.repairs == []


# --------------------------------------------------------------------------- units


def test_connected_components_form_one_unit():
    gt = [f("gt_1"), f("gt_2")]
    pred = [f("p_1"), f("p_2")]
    rows = [row("p_1", "gt_1", "aggregate"), row("p_1", "gt_2", "aggregate"), row("p_2", "gt_2", "aggregate")]
    scores, _ = score(gt, pred, matching(rows), grading({}))
    assert units_by_kind(scores) == [("matched", ["gt_1", "gt_2"], ["p_1", "p_2"], "COR")]


def test_generic_covered_normal_findings_form_generic_units():
    gt = [f("gt_1", status="normal"), f("gt_2", status="normal")]
    pred = [f("p_1", status="normal")]
    rows = [row("p_1", "gt_1", "generic"), row("p_1", "gt_2", "generic")]
    scores, _ = score(gt, pred, matching(rows))
    assert [u.kind for u in scores.units] == ["generic"] * 3
    assert scores.outcomes["generic"] == 3 and scores.actionable_errors == 0
    assert all(u.outcome is None and u.errors == [] for u in scores.units)


def test_generic_covered_abnormal_reference_is_missed_not_excused():
    # "Study unremarkable." against three urgent findings costs three actionable errors
    gt = [f(f"gt_{i}", sig="urgent") for i in (1, 2, 3)]
    pred = [f("p_1", status="normal", sig="routine", text="Study unremarkable.")]
    rows = [row("p_1", f"gt_{i}", "generic") for i in (1, 2, 3)]
    scores, _ = score(gt, pred, matching(rows))
    assert scores.outcomes == {"cor": 0, "par": 0, "inc": 0, "mis": 3, "spu": 0, "generic": 1}
    assert scores.actionable_errors == 3


def test_generic_covered_abnormal_candidate_is_spurious():
    gt = [f("gt_1", status="normal"), f("gt_2", status="normal")]
    pred = [f("p_1", status="abnormal", sig="notable")]
    rows = [row("p_1", "gt_1", "generic"), row("p_1", "gt_2", "generic")]
    scores, _ = score(gt, pred, matching(rows))
    assert scores.outcomes["spu"] == 1 and scores.outcomes["generic"] == 2
    assert scores.actionable_errors == 1


def test_finding_with_a_strong_row_is_not_generic_covered():
    gt = [f("gt_1", status="normal"), f("gt_2", status="normal")]
    pred = [f("p_1", status="normal"), f("p_2", status="normal")]
    rows = [row("p_1", "gt_1", "generic"), row("p_1", "gt_2", "generic"), row("p_2", "gt_1", "generic"),
            row("p_2", "gt_2", "aggregate"), row("p_1", "gt_1", "direct")]
    scores, _ = score(gt, pred, matching(rows))
    kinds = sorted(u.kind for u in scores.units)
    assert kinds == ["matched", "matched"]


def test_unmatched_findings_are_mis_and_spu_with_their_own_tier():
    gt = [f("gt_1", sig="critical")]
    pred = [f("p_1", sig="routine")]
    scores, _ = score(gt, pred, matching([], ["p_1"], ["gt_1"]))
    assert [(u.outcome, u.tier, u.actionable) for u in scores.units] == [
        ("MIS", "critical", True),
        ("SPU", "routine", False),
    ]
    assert scores.actionable_errors == 1


def test_unit_tier_is_the_highest_among_its_findings():
    gt = [f("gt_1", sig="routine")]
    pred = [f("p_1", sig="critical", status="normal")]
    scores, _ = score(gt, pred, matching([row("p_1", "gt_1")]), grading({("p_1", "gt_1"): []}))
    (unit,) = scores.units
    assert unit.tier == "critical" and unit.outcome == "INC" and unit.actionable


def test_routine_errors_do_not_count_as_actionable():
    gt = [f("gt_1", sig="routine")]
    scores, _ = score(gt, [], matching([], [], ["gt_1"]))
    assert scores.outcomes["mis"] == 1 and scores.actionable_errors == 0


# --------------------------------------------------------------------------- judge errors and outcomes


def test_outcome_inc_par_cor():
    gt = [f("gt_1"), f("gt_2"), f("gt_3")]
    pred = [f("p_1"), f("p_2"), f("p_3")]
    rows = [row("p_1", "gt_1"), row("p_2", "gt_2"), row("p_3", "gt_3")]
    grade = grading({("p_1", "gt_1"): [("location", "major")], ("p_2", "gt_2"): [("morphology", "minor")],
                     ("p_3", "gt_3"): []})
    scores, repairs = score(gt, pred, matching(rows), grade)
    assert [u.outcome for u in scores.units] == ["INC", "PAR", "COR"]
    assert repairs == []


def test_grading_with_unknown_dimension_or_severity_is_ignored_and_recorded():
    gt, pred = [f("gt_1")], [f("p_1")]
    grade = GradingStage(
        pairs=[("p_1", "gt_1")],
        grades=[{"pred_id": "p_1", "gt_id": "gt_1", "errors": [
            {"reasoning": "x", "dimension": "laterality", "severity": "major"},
            {"reasoning": "x", "dimension": "location", "severity": "critical"}]}],
    )
    scores, repairs = score(gt, pred, matching([row("p_1", "gt_1")]), grade)
    assert scores.units[0].outcome == "COR"
    assert sum("ignored grading error" in r for r in repairs) == 2


def test_grading_of_a_row_that_is_not_strong_is_ignored():
    gt, pred = [f("gt_1")], [f("p_1")]
    grade = grading({("p_1", "gt_1"): [], ("p_1", "gt_2"): [("location", "major")]})
    scores, repairs = score(gt, pred, matching([row("p_1", "gt_1")]), grade)
    assert scores.units[0].outcome == "COR"
    assert any("ignored grading of p_1-gt_2" in r for r in repairs)


def test_strong_row_without_grading_is_scored_on_deterministic_errors():
    gt, pred = [f("gt_1", status="normal")], [f("p_1")]
    scores, repairs = score(gt, pred, matching([row("p_1", "gt_1")]), None)
    assert scores.units[0].outcome == "INC"
    assert any("no grading entry" in r for r in repairs)


def test_measurement_errors_pool_over_the_unit():
    gt = [f("gt_1", measurements=[m(28, "mm")]), f("gt_2", measurements=[m(23, "mm")])]
    pred = [f("p_1", measurements=[m(2.3, "cm"), m(2.8, "cm")])]
    rows = [row("p_1", "gt_1", "aggregate"), row("p_1", "gt_2", "aggregate")]
    scores, _ = score(gt, pred, matching(rows), grading({("p_1", "gt_1"): [], ("p_1", "gt_2"): []}))
    assert scores.units[0].outcome == "COR"


# --------------------------------------------------------------------------- pair scores


def test_worked_example_fig3b():
    rec = score_record(fig3_record())
    s = rec.scores
    assert s.actionable_errors == 2
    assert [(u.gt_ids, u.outcome, u.tier) for u in s.units] == [
        (["gt_1"], "INC", "urgent"),
        (["gt_2"], "INC", "urgent"),
        (["gt_3"], "PAR", "urgent"),
        (["gt_4"], "PAR", "notable"),
    ]
    triage = s.safety["triage"]
    assert (triage.recall_num, triage.recall_den) == (1, 2)
    assert (triage.precision_num, triage.precision_den) == (1, 3)
    assert triage.recall == 0.5 and triage.precision == pytest.approx(1 / 3)
    assert [e.dimension for e in s.units[0].errors] == ["comparison"]
    assert {(e.dimension, e.severity) for e in s.units[3].errors} == {
        ("comparison", "minor"),
        ("severity", "minor"),
    }
    assert s.attributes["comparison"] == {"none": 2, "minor": 1, "major": 1}
    assert s.attributes["severity"] == {"none": 2, "minor": 1, "major": 1}
    assert s.attributes["certainty"] == {"none": 3, "minor": 1, "major": 0}
    assert s.subsets["abnormal"] == {"cor": 0, "par": 2, "inc": 2, "mis": 0, "spu": 0, "actionable_errors": 2}
    assert s.subsets["comparison"]["inc"] == 1 and s.subsets["comparison"]["par"] == 1
    assert s.subsets["normal"]["actionable_errors"] == 0
    assert s.attribution.reference.attributed == 4 and s.attribution.candidate.attributed == 4


def test_safety_ratio_with_zero_denominator_is_null():
    scores, _ = score([f("gt_1", sig="routine")], [], matching([], [], ["gt_1"]))
    triage = scores.safety["triage"]
    assert triage.recall is None and triage.precision is None
    assert (triage.recall_den, triage.precision_den) == (0, 0)
    assert scores.safety["all"].recall == 0.0


def test_generic_findings_are_in_the_denominator_never_the_numerator():
    gt = [f("gt_1", status="normal", sig="urgent"), f("gt_2", status="normal", sig="urgent")]
    pred = [f("p_1", status="normal", sig="routine")]
    rows = [row("p_1", "gt_1", "generic"), row("p_1", "gt_2", "generic")]
    scores, _ = score(gt, pred, matching(rows))
    assert (scores.safety["triage"].recall_num, scores.safety["triage"].recall_den) == (0, 2)


def test_safety_uses_each_finding_own_tier():
    # the unit is urgent (from the candidate), but the routine reference finding is not
    # in the triage denominator
    gt = [f("gt_1", sig="routine")]
    pred = [f("p_1", sig="urgent")]
    scores, _ = score(gt, pred, matching([row("p_1", "gt_1")]), grading({("p_1", "gt_1"): []}))
    assert scores.safety["triage"].recall_den == 0
    assert (scores.safety["triage"].precision_num, scores.safety["triage"].precision_den) == (1, 1)


def test_attribution_normalises_and_requires_every_quote():
    report = "Small  LEFT\npleural effusion. No pneumothorax."
    gt = [
        f("gt_1", evidence=["small left pleural effusion"]),  # case and whitespace differ
        f("gt_2", evidence=["No pneumothorax", "no pleural thickening"]),  # one quote missing
        f("gt_3", evidence=[]),  # no evidence
        f("gt_4", evidence=["  ", "No pneumothorax."]),  # blank quotes are skipped
    ]
    scores, _ = score(gt, [], matching([], [], []), reference=report)
    assert scores.attribution.reference.findings == 4
    assert scores.attribution.reference.attributed == 2


def test_attribution_uses_nfc_normalisation():
    decomposed = "Cafe\u0301 au lait spot."
    scores, _ = score([f("gt_1", evidence=["Caf\u00e9 au lait"])], [], matching(), reference=decomposed)
    assert scores.attribution.reference.attributed == 1


def test_status_inversion_lands_in_the_abnormal_subset():
    gt = [f("gt_1", status="abnormal", sig="critical")]
    pred = [f("p_1", status="normal", sig="critical")]
    scores, _ = score(gt, pred, matching([row("p_1", "gt_1")]), grading({("p_1", "gt_1"): []}))
    assert scores.subsets["abnormal"]["inc"] == 1 and scores.subsets["normal"]["inc"] == 0


def test_subsets_leave_generic_units_out_and_measurement_subset_counts_priors():
    gt = [f("gt_1", status="normal"), f("gt_2", status="normal"), f("gt_3", measurements=[m(3, "mm", prior=True)], sig="notable")]
    pred = [f("p_1", status="normal")]
    rows = [row("p_1", "gt_1", "generic"), row("p_1", "gt_2", "generic")]
    scores, _ = score(gt, pred, matching(rows, [], ["gt_3"]))
    assert scores.subsets["normal"] == {"cor": 0, "par": 0, "inc": 0, "mis": 0, "spu": 0, "actionable_errors": 0}
    assert scores.subsets["measurement"]["mis"] == 1


def test_duplicate_finding_ids_are_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="duplicate finding id 'gt_1'"):
        score([f("gt_1"), f("gt_1")], [], matching())


def test_failed_record_is_never_scored():
    rec = fig3_record().model_copy(update={"error": "judge timed out"})
    assert score_record(rec).scores is None


def test_record_without_stages_and_without_error_is_rejected():
    rec = fig3_record()
    rec.stages.matching = None
    with pytest.raises(ValueError, match="stage matching is missing"):
        score_record(rec)


TIERS = ("critical", "urgent", "notable", "routine")


ACTIONABLE = ("critical", "urgent", "notable")


@pytest.mark.parametrize("tier", TIERS)
def test_an_spu_of_a_normal_finding_is_never_actionable(tier):
    scores = score_record(spu_record(("normal", tier))).scores
    (unit,) = scores.units
    assert (unit.kind, unit.outcome, unit.actionable) == ("spu", "SPU", False)
    assert scores.actionable_errors == 0
    # it stays an SPU: outcome counts and safety precision keep it
    assert scores.outcomes["spu"] == 1
    assert scores.safety["all"].precision_den == 1 and scores.safety["all"].precision_num == 0
    if tier in ACTIONABLE:
        assert scores.safety["actionable"].precision_den == 1
    assert scores.subsets["normal"]["spu"] == 1 and scores.subsets["normal"]["actionable_errors"] == 0


@pytest.mark.parametrize("tier", TIERS)
def test_an_spu_of_an_abnormal_finding_is_actionable_at_an_actionable_tier(tier):
    scores = score_record(spu_record(("abnormal", tier))).scores
    (unit,) = scores.units
    assert unit.actionable is (tier in ACTIONABLE)
    assert scores.actionable_errors == (tier in ACTIONABLE)
    assert scores.subsets["abnormal"]["actionable_errors"] == (tier in ACTIONABLE)


@pytest.mark.parametrize("tier", TIERS)
def test_mixed_spu_units_count_only_the_abnormal_one(tier):
    scores = score_record(spu_record(("normal", tier), ("abnormal", tier))).scores
    assert [u.actionable for u in scores.units] == [False, tier in ACTIONABLE]
    assert scores.actionable_errors == (tier in ACTIONABLE)
    assert scores.outcomes["spu"] == 2
    assert scores.subsets["normal"]["actionable_errors"] == 0
    assert scores.subsets["abnormal"]["actionable_errors"] == (tier in ACTIONABLE)


def test_the_exception_is_for_spu_only():
    # a missed normal finding and an incorrect all-normal unit stay actionable errors
    gt = [f("gt_1", "normal", "urgent"), f("gt_2", "normal", "urgent", comparison="stable")]
    pred = [f("p_1", "normal", "urgent", comparison="new")]
    scores = score_record(record("x", gt, pred, matching([row("p_1", "gt_2")]))).scores
    assert sorted((u.outcome, u.actionable) for u in scores.units) == [
        ("INC", True),
        ("MIS", True),
    ]
    assert scores.actionable_errors == 2


def test_a_position_difference_alone_makes_the_unit_partial_not_incorrect():
    gt = [f("gt_1", sig="critical", measurements=[pos(1, "cm")])]
    pred = [f("p_1", sig="critical", measurements=[pos(1.5, "cm")])]
    scores = score_record(record("ett", gt, pred, matching([row("p_1", "gt_1")]))).scores
    (unit,) = scores.units
    assert (unit.outcome, unit.actionable, scores.actionable_errors) == ("PAR", False, 0)


@pytest.mark.parametrize("quantity, outcome", [(None, "PAR"), ("lymph_node_short_axis", "INC")])
def test_omitted_value_sets_the_outcome_by_its_quantity(quantity, outcome):
    # "moderate pneumothorax" against the same with "lung edge 3 cm from the apex"
    gt = [f("gt_1", sig="critical", measurements=[mq(3, "cm", quantity)])]
    pred = [f("p_1", sig="critical")]
    scores = score_record(record("o", gt, pred, matching([row("p_1", "gt_1")]))).scores
    assert scores.units[0].outcome == outcome
    assert scores.actionable_errors == (outcome == "INC")
