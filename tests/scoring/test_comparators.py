"""docs/scoring.md section 4: status, comparison and measurement comparators, rule by rule."""

import pytest

from builders import f, m, mq, pos
from radmatch_audit.scoring.comparators import (
    comparison_error,
    is_major,
    measurement_errors,
    normalise,
    status_error,
)

SIZE = ("size", "mm")


def severities(errors):
    return sorted(e.severity for e in errors)


# --------------------------------------------------------------------------- status


def test_status_inversion_is_a_major_error():
    err = status_error(f("p_1", status="normal"), f("gt_1", status="abnormal"))
    assert (err.dimension, err.severity, err.source) == ("status", "major", "deterministic")
    assert (err.pred_id, err.gt_id) == ("p_1", "gt_1")


def test_same_status_is_no_error():
    assert status_error(f("p_1", status="normal"), f("gt_1", status="normal")) is None


# --------------------------------------------------------------------------- comparison


@pytest.mark.parametrize(
    "gt, pred, expected",
    [
        (None, None, None),
        ("new", "new", None),
        ("new", "stable", "major"),  # active -> benign
        ("stable", "worsening", "major"),  # benign -> active
        ("resolved", "new", "major"),
        ("improving", "worsening", "major"),
        ("stable", "improving", "minor"),  # same trajectory
        ("new", "worsening", "minor"),
        ("resolved", "stable", "minor"),
        (None, "worsening", "minor"),  # one side null
        ("new", None, "minor"),
    ],
)
def test_comparison_by_trajectory(gt, pred, expected):
    err = comparison_error(f("p_1", comparison=pred), f("gt_1", comparison=gt))
    assert (err.severity if err else None) == expected


# --------------------------------------------------------------------------- measurement table


@pytest.mark.parametrize(
    "a, b, family, major",
    [
        # size: major needs > 20 % AND > 2 mm
        (10.0, 12.0, SIZE, False),  # 20 %, 2 mm: neither strictly above
        (10.0, 12.5, SIZE, True),  # 25 %, 2.5 mm
        (20.0, 23.0, SIZE, False),  # 15 %, 3 mm: relative test fails
        (5.0, 7.1, SIZE, True),  # 42 %, 2.1 mm
        (5.0, 6.9, SIZE, False),  # 38 % but under the 2 mm floor
        (2.4, 4.4, SIZE, False),  # exactly 2 mm after rounding: floor not exceeded
        (0.0, 2.0, SIZE, False),  # a == 0: 2 mm test alone
        (0.0, 2.5, SIZE, True),
        # ratio: > 30 %
        (0.5, 0.65, ("ratio", None), False),  # exactly 30 %
        (0.5, 0.66, ("ratio", None), True),
        (0.0, 0.01, ("ratio", None), True),  # a == 0: any difference is major
        # count: any difference
        (3.0, 4.0, ("count", None), True),
        # attenuation in HU: > 20 HU or crossing -10, 10, 20
        (30.0, 50.0, ("attenuation", "hu"), False),  # exactly 20
        (30.0, 51.0, ("attenuation", "hu"), True),
        (-12.0, -8.0, ("attenuation", "hu"), True),  # crosses -10
        (8.0, 12.0, ("attenuation", "hu"), True),  # crosses 10
        (18.0, 22.0, ("attenuation", "hu"), True),  # crosses 20
        (10.0, 12.0, ("attenuation", "hu"), True),  # 10 is not above 10, 12 is: a crossing
        (11.0, 13.0, ("attenuation", "hu"), False),
        (12.0, 18.0, ("attenuation", "hu"), False),
        (20.0, 21.0, ("attenuation", "hu"), True),  # 20 is not > 20, 21 is
        (0.0, 5.0, ("attenuation", "hu"), False),  # a == 0: HU has no relative test
        # attenuation in other units and other: > 20 %
        (4.0, 4.8, ("attenuation", "suv"), False),
        (4.0, 4.9, ("attenuation", "suv"), True),
        (10.0, 12.0, ("other", "mmhg"), False),
        (10.0, 12.1, ("other", "mmhg"), True),
        (0.0, 0.1, ("other", "mmhg"), True),
    ],
)
def test_major_threshold_table(a, b, family, major):
    assert is_major(a, b, family) is major


def test_hu_boundary_at_ten_uses_strict_side():
    # 10 is on the "not above 10" side, 10.5 is above it: a crossing, hence major
    assert is_major(10.0, 10.5, ("attenuation", "hu")) is True


@pytest.mark.parametrize(
    "ref, cand, expected",
    [
        ([m(10, "mm")], [m(10, "mm")], []),
        ([m(10, "mm")], [m(11, "mm")], ["minor"]),  # below threshold but different
        ([m(10, "mm")], [m(1.3, "cm")], ["major"]),  # 13 mm: 30 %, 3 mm
        ([m(1.0, "cm")], [m(10, "millimeters")], []),  # synonyms and conversion
        ([m(0.01, "m")], [m(10, "mm")], []),
        ([m(10, None)], [m(10, "mm")], []),  # null size adopts the other unit (mm)
        ([m(1.0, None)], [m(1.0, "cm")], []),  # null adopts cm: 1 cm == 1 cm
        ([m(2.3, "cm")], [], ["minor"]),  # omitted, no quantity: minor (2026-12-02)
        ([], [m(2.3, "cm")], ["minor"]),  # added
        ([m(3, None, "count")], [m(4, None, "count")], ["major"]),
        ([m(26, "HU", "attenuation")], [m(30, None, "attenuation")], ["minor"]),  # bare value in HU
        ([m(5, "HU", "attenuation")], [m(15, None, "attenuation")], ["major"]),  # crosses 10
        ([m(50, "%", "ratio")], [m(50, "percent", "ratio")], []),
        ([m(55, "pct", "ratio")], [m(0.55, None, "ratio")], []),  # pct vs fraction
        ([m(55, "pct", "ratio")], [m(0.80, None, "ratio")], ["major"]),
        ([m(4.2, None, "attenuation")], [m(4.2, "HU", "attenuation")], []),
        ([m(4.2, "SUV", "attenuation")], [m(4.2, "hu", "attenuation")], ["minor", "minor"]),
        ([m(10, "mm")], [m(10, None, "count")], ["minor", "minor"]),  # no cross-category pairing
    ],
)
def test_measurement_comparison(ref, cand, expected):
    assert severities(measurement_errors(ref, cand)) == expected


def test_prior_values_are_not_compared():
    ref = [m(8, "mm", prior=True), m(5, "mm")]
    cand = [m(5, "mm"), m(12, "mm", prior=True)]
    assert measurement_errors(ref, cand) == []


def test_pct_and_null_ratio_divides_pct_by_100():
    ref, cand = normalise([m(55, "pct", "ratio")], [m(0.55, None, "ratio")])
    assert ref[0].value == pytest.approx(0.55) and ref[0].unit is None


def test_null_unit_not_adopted_when_units_disagree():
    ref, cand = normalise([m(10, "mm"), m(1, "cm")], [m(10, None)])
    # two named units: the null stays null and a null size is read in mm
    assert [v.value for v in cand] == [10.0] and cand[0].unit == "mm"


def test_optimal_pairing_prefers_closest_values():
    # greedy in input order would pair 10-19 and 20-11: both major
    errors = measurement_errors([m(10, "mm"), m(20, "mm")], [m(19, "mm"), m(11, "mm")])
    assert severities(errors) == ["minor", "minor"]


def test_pairing_tie_break_prefers_fewer_major_errors():
    # 2->4 and 8->4 cost the same (0.5); 2->4 is minor (2 mm floor), 8->4 is major,
    # so the pairing keeps 2->4 and leaves 8 omitted (minor: it has no quantity)
    for ref in ([m(2, "mm"), m(8, "mm")], [m(8, "mm"), m(2, "mm")]):
        errors = measurement_errors(ref, [m(4, "mm")])
        assert severities(errors) == ["minor", "minor"]
        assert any("8 mm omitted" in e.reasoning for e in errors)


def test_pooled_measurement_errors_have_no_row_ids():
    (err,) = measurement_errors([m(10, "mm")], [])
    assert err.pred_id is None and err.gt_id is None and "omitted" in err.reasoning


def found(ref, cand):
    """[(severity, reasoning)] of the measurement errors, sorted."""
    return sorted((e.severity, e.reasoning) for e in measurement_errors(ref, cand))


def test_position_values_convert_to_mm_like_sizes():
    ref, cand = normalise([pos(5, "cm"), pos(3, "centimeters")], [pos(40, "mm"), pos(0.02, "m")])
    assert [(v.value, v.unit) for v in ref] == [(50.0, "mm"), (30.0, "mm")]
    assert [(v.value, v.unit) for v in cand] == [(40.0, "mm"), (20.0, "mm")]
    assert measurement_errors([pos(5, "cm")], [pos(50, "mm")]) == []
    assert measurement_errors([pos(5, None)], [pos(5, "mm")]) == []  # null is mm, like a size


@pytest.mark.parametrize(
    "ref, cand, expected",
    [
        # the review's two tube positions: 5 cm against 3 cm above the carina, both acceptable
        ([pos(5, "cm")], [pos(3, "cm")], [("minor", "position 50 mm -> 30 mm")]),
        # 1 cm against 1.5 cm beyond the carina: a malposition both agree on
        ([pos(1, "cm")], [pos(15, "mm")], [("minor", "position 10 mm -> 15 mm")]),
        ([pos(0, "cm")], [pos(4, "cm")], [("minor", "position 0 mm -> 40 mm")]),  # a == 0
        ([pos(4.2, "cm")], [pos(4.2, "cm")], []),
        # an unconvertible unit pairs per unit, and any difference is minor there too
        ([pos(2, "in")], [pos(3, "in")], [("minor", "position 2 in -> 3 in")]),
        ([pos(2, "in")], [pos(50, "mm")], [("minor", "position 2 in omitted"),
                                           ("minor", "position 50 mm added")]),
        # its own family: never paired with a size
        ([pos(5, "cm")], [mq(50, "mm")], [("minor", "position 50 mm omitted"),
                                          ("minor", "size 50 mm added")]),
    ],
)
def test_position_differences_are_minor(ref, cand, expected):
    assert found(ref, cand) == expected


def test_the_same_values_as_other_or_size_were_or_are_major():
    # what `position` replaces: a tip distance as `other` was major at 5 vs 3 cm
    assert found([mq(5, "cm", category="other")], [mq(3, "cm", category="other")])[0][0] == "major"
    assert found([mq(5, "cm")], [mq(3, "cm")])[0][0] == "major"  # and as a size


def test_an_omitted_position_value_is_minor_even_with_a_quantity():
    # no quantity is a position; a mislabelled one does not make the omission major
    assert found([pos(5, "cm", "mediastinal_width")], []) == [
        ("minor", "position 50 mm omitted")
    ]


def test_an_omitted_value_is_major_only_with_a_quantity():
    assert found([mq(12, "mm")], []) == [("minor", "size 12 mm omitted")]
    assert found([mq(5.6, "cm", "ascending_aorta_diameter")], []) == [
        ("major", "size 56 mm omitted: ascending_aorta_diameter")
    ]
    ratio = mq(0.55, None, "cardiothoracic_ratio", "ratio")
    assert found([ratio], []) == [("major", "ratio 0.55 omitted: cardiothoracic_ratio")]


def test_an_added_value_is_minor_with_or_without_a_quantity():
    assert found([], [mq(12, "mm")]) == [("minor", "size 12 mm added")]
    assert found([], [mq(56, "mm", "ascending_aorta_diameter")]) == [("minor", "size 56 mm added")]


def test_only_the_value_left_over_is_judged_by_its_quantity():
    # three nodules against the same three listed as one: the two left over are minor
    ref = [mq(4, "mm"), mq(5, "mm"), mq(6, "mm")]
    assert found(ref, [mq(5, "mm")]) == [("minor", "size 4 mm omitted"), ("minor", "size 6 mm omitted")]
    # a prior value is never omitted, quantity or not
    assert found([mq(56, "mm", "ascending_aorta_diameter", prior=True)], []) == []


@pytest.mark.parametrize(
    "ref, cand, severity, crossed",
    [
        # a 6 mm nodule is in Fleischner's 6-8 mm group (>= 6); 8 mm is still in it (> 8)
        (mq(6, "mm", "solid_nodule_diameter"), mq(5.5, "mm", "solid_nodule_diameter"),
         "major", ">= 6 mm"),
        (mq(6, "mm", "solid_nodule_diameter"), mq(6.5, "mm", "solid_nodule_diameter"), "minor", None),
        (mq(0.6, "cm", "solid_nodule_diameter"), mq(6.5, "mm", "solid_nodule_diameter"),
         "minor", None),
        (mq(8, "mm", "solid_nodule_diameter"), mq(7, "mm", "solid_nodule_diameter"), "minor", None),
        (mq(8, "mm", "solid_nodule_diameter"), mq(8.5, "mm", "solid_nodule_diameter"),
         "major", "> 8 mm"),
        # a 10 mm node is enlarged
        (mq(10, "mm", "lymph_node_short_axis"), mq(9.5, "mm", "lymph_node_short_axis"),
         "major", ">= 10 mm"),
        (mq(1.0, "cm", "lymph_node_short_axis"), mq(1.2, "cm", "lymph_node_short_axis"),
         "minor", None),
        # a 3.0 cm abdominal aorta is aneurysmal
        (mq(3.0, "cm", "abdominal_aorta_diameter"), mq(2.9, "cm", "abdominal_aorta_diameter"),
         "major", ">= 30 mm"),
        (mq(3.0, "cm", "abdominal_aorta_diameter"), mq(32, "mm", "abdominal_aorta_diameter"),
         "minor", None),
        (mq(5.5, "cm", "abdominal_aorta_diameter"), mq(54, "mm", "abdominal_aorta_diameter"),
         "major", ">= 55 mm"),
        # a cardiothoracic ratio of 0.50 is not cardiomegaly (> 0.50), as a fraction or percent
        (mq(0.50, None, "cardiothoracic_ratio", "ratio"), mq(0.49, None, "cardiothoracic_ratio", "ratio"),
         "minor", None),
        (mq(0.50, None, "cardiothoracic_ratio", "ratio"), mq(0.51, None, "cardiothoracic_ratio", "ratio"),
         "major", "> 0.5"),
        (mq(50, "%", "cardiothoracic_ratio", "ratio"), mq(49, "percent", "cardiothoracic_ratio", "ratio"),
         "minor", None),
        (mq(50, "pct", "cardiothoracic_ratio", "ratio"), mq(51, "%", "cardiothoracic_ratio", "ratio"),
         "major", "> 0.5"),
        (mq(50, "%", "cardiothoracic_ratio", "ratio"), mq(0.51, None, "cardiothoracic_ratio", "ratio"),
         "major", "> 0.5"),
        # 80 mm is not a widened mediastinum (> 80); 29 mm pulmonary artery is (>= 29)
        (mq(8.0, "cm", "mediastinal_width"), mq(79, "mm", "mediastinal_width"), "minor", None),
        (mq(2.9, "cm", "pulmonary_artery_diameter"), mq(28.5, "mm", "pulmonary_artery_diameter"),
         "major", ">= 29 mm"),
    ],
)
def test_values_exactly_at_a_threshold_lie_on_its_side(ref, cand, severity, crossed):
    ((sev, reasoning),) = found([ref], [cand])
    assert sev == severity
    if crossed is None:
        assert " crosses " not in reasoning
    else:
        assert f"{ref.quantity} crosses {crossed} (" in reasoning
