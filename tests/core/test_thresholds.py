"""docs/scoring.md section 4 step 6: clinical thresholds turn a crossing pair into a major error."""

import csv
import io
import json
import random
import re
from pathlib import Path

import pytest

import dashboard_fixtures as fx
from builders import f, fig3_record, m, matching, record, row
from legacy_measurements import has_quantities, scored_by_legacy, without_quantities
from radmatch_audit.read.corpus import CorpusSummary
from radmatch_audit.read.recompute import recompute_lines, score_record
from radmatch_audit.files.record_io import parse_record
from radmatch_audit.core.schemas import Measurement
from radmatch_audit.scoring.comparators import measurement_errors
from radmatch_audit.testing.synthetic import PROFILES
from radmatch_audit.core.thresholds import CLINICAL_THRESHOLDS, TABLE_FILE, parse_table

REPO = Path(__file__).resolve().parents[2]

# The table as the contract gives it, written out here so the data file is checked too.
TABLE = {
    "cardiothoracic_ratio": (0.50,),
    "mediastinal_width": (80.0,),
    "ascending_aorta_diameter": (40.0, 55.0),
    "abdominal_aorta_diameter": (30.0, 55.0),
    "lymph_node_short_axis": (10.0,),
    "solid_nodule_diameter": (6.0, 8.0),
    "pulmonary_artery_diameter": (29.0,),
}
# ... and the side of each threshold: where a value equal to it lies (">=": above it)
SIDES = {
    "cardiothoracic_ratio": (">",),
    "mediastinal_width": (">",),
    "ascending_aorta_diameter": (">=", ">="),
    "abdominal_aorta_diameter": (">=", ">="),
    "lymph_node_short_axis": (">=",),
    "solid_nodule_diameter": (">=", ">"),
    "pulmonary_artery_diameter": (">=",),
}
SIZES = [q for q in TABLE if q != "cardiothoracic_ratio"]


def mq(value, unit, quantity, category="size", prior=False):
    return Measurement(value=value, unit=unit, category=category, prior=prior, quantity=quantity)


def compare(ref, cand):
    """(severity, reasoning) of the one error the pair gives, or None."""
    errors = measurement_errors(ref, cand)
    assert len(errors) <= 1, errors
    return (errors[0].severity, errors[0].reasoning) if errors else None


def severity(ref, cand):
    result = compare(ref, cand)
    return result[0] if result else None


def test_the_data_file_holds_the_contracts_table():
    assert {q: spec.thresholds for q, spec in CLINICAL_THRESHOLDS.items()} == TABLE
    assert {q: spec.sides for q, spec in CLINICAL_THRESHOLDS.items()} == SIDES
    assert {spec.unit for spec in CLINICAL_THRESHOLDS.values()} == {"mm", "fraction"}
    assert all(
        (spec.category, spec.unit) in {("size", "mm"), ("ratio", "fraction")}
        for spec in CLINICAL_THRESHOLDS.values()
    )


# --------------------------------------------------------------------------- one test per row


@pytest.mark.parametrize("quantity", SIZES)
def test_size_row_either_side_of_each_threshold_is_major(quantity):
    for t, side in zip(TABLE[quantity], SIDES[quantity]):
        below, above = t - 0.5, t + 0.5  # 1 mm apart: minor by the size rule alone
        assert severity([m(below, "mm")], [m(above, "mm")]) == "minor"
        for ref, cand in ((below, above), (above, below)):
            # in mm, and the same values in cm (converted before the test)
            for unit, scale in (("mm", 1), ("cm", 10)):
                result = compare(
                    [mq(ref / scale, unit, quantity)], [mq(cand / scale, unit, quantity)]
                )
                assert result is not None and result[0] == "major", (quantity, t, unit, result)
                assert f"{quantity} crosses {side} {t:g} mm" in result[1]
        # t itself lies on the side the table gives it (contract 3: ">=" puts it above)
        t_is_above = side == ">="
        assert severity([mq(t, "mm", quantity)], [mq(t + 0.5, "mm", quantity)]) == (
            "minor" if t_is_above else "major"
        )
        assert severity([mq(t - 0.5, "mm", quantity)], [mq(t, "mm", quantity)]) == (
            "major" if t_is_above else "minor"
        )


@pytest.mark.parametrize("quantity", SIZES)
def test_size_row_same_side_stays_with_the_size_rule(quantity):
    t = max(TABLE[quantity])
    assert severity([mq(t + 1, "mm", quantity)], [mq(t + 2, "mm", quantity)]) == "minor"
    assert severity([mq(t / 10 + 0.1, "cm", quantity)], [mq(t + 2, "mm", quantity)]) == "minor"
    # a difference the size rule already calls major stays major on one side
    assert severity([mq(t + 1, "mm", quantity)], [mq(2 * t, "mm", quantity)]) == "major"


def test_cardiothoracic_ratio_row_in_fractions_and_percent():
    q = "cardiothoracic_ratio"
    crossing = [
        ([mq(0.49, None, q, "ratio")], [mq(0.52, None, q, "ratio")]),  # fractions
        ([mq(52, "%", q, "ratio")], [mq(49, "percent", q, "ratio")]),  # percent on both sides
        ([mq(49, "pct", q, "ratio")], [mq(0.52, None, q, "ratio")]),  # pct against a fraction
        ([mq(0.50, None, q, "ratio")], [mq(0.51, None, q, "ratio")]),  # 0.50 is not above 0.50
    ]
    for ref, cand in crossing:
        assert severity(ref, [c.model_copy(update={"quantity": None}) for c in cand]) == "minor"
        sev, reasoning = compare(ref, cand)
        assert sev == "major"
        assert reasoning.endswith(
            "cardiothoracic_ratio crosses > 0.5 (cardiomegaly on a PA chest radiograph)"
        )
    same_side = [
        ([mq(0.51, None, q, "ratio")], [mq(0.55, None, q, "ratio")]),
        ([mq(45, "%", q, "ratio")], [mq(49, "%", q, "ratio")]),
        ([mq(0.45, None, q, "ratio")], [mq(50, "pct", q, "ratio")]),
    ]
    for ref, cand in same_side:
        assert severity(ref, cand) == "minor"


def test_reasoning_names_the_threshold_and_its_meaning():
    q = "ascending_aorta_diameter"
    sev, reasoning = compare([mq(5.4, "cm", q)], [mq(5.6, "cm", q)])
    assert sev == "major"
    assert (
        reasoning
        == "size 54 mm -> 56 mm: ascending_aorta_diameter crosses >= 55 mm"
        " (surgical repair threshold)"
    )
    _, both = compare([mq(35, "mm", q)], [mq(56, "mm", q)])
    assert both.endswith("crosses >= 40 mm (dilated) and >= 55 mm (surgical repair threshold)")
    _, nodule = compare(
        [mq(5, "mm", "solid_nodule_diameter")], [mq(7, "mm", "solid_nodule_diameter")]
    )
    assert nodule.endswith(
        "solid_nodule_diameter crosses >= 6 mm (Fleischner follow-up categories)"
    )
    _, large = compare(
        [mq(8, "mm", "solid_nodule_diameter")], [mq(9, "mm", "solid_nodule_diameter")]
    )
    assert large.endswith("solid_nodule_diameter crosses > 8 mm (Fleischner follow-up categories)")


def test_values_are_rounded_to_6_decimals_before_the_side_test():
    q = "ascending_aorta_diameter"  # >= 55: a value that rounds to 55 is above it
    assert severity([mq(54, "mm", q)], [mq(54.9999996, "mm", q)]) == "major"  # 55.000000
    assert severity([mq(54, "mm", q)], [mq(54.999998, "mm", q)]) == "minor"
    assert severity([mq(5.4, "cm", q)], [mq(5.49999996, "cm", q)]) == "major"  # 54.9999996 mm
    w = "mediastinal_width"  # > 80: a value that rounds to 80 is not above it
    assert severity([mq(79, "mm", w)], [mq(80.0000004, "mm", w)]) == "minor"
    assert severity([mq(79, "mm", w)], [mq(80.000001, "mm", w)]) == "major"


def test_meanings_follow_the_thresholds():
    assert CLINICAL_THRESHOLDS["abdominal_aorta_diameter"].meanings == (
        "aneurysm",
        "repair threshold",
    )
    assert (
        CLINICAL_THRESHOLDS["solid_nodule_diameter"].meanings
        == ("Fleischner follow-up categories",) * 2
    )
    assert CLINICAL_THRESHOLDS["lymph_node_short_axis"].meanings == ("enlarged node",)


# --------------------------------------------------------------------------- when nothing changes


def test_quantity_on_one_side_only_changes_nothing():
    q = "ascending_aorta_diameter"
    assert compare([mq(54, "mm", q)], [mq(56, "mm", None)]) == ("minor", "size 54 mm -> 56 mm")
    assert compare([mq(54, "mm", None)], [mq(56, "mm", q)]) == ("minor", "size 54 mm -> 56 mm")


def test_two_different_quantities_change_nothing():
    # both quantities have a 55 mm threshold, but they are not the same quantity
    ref = [mq(54, "mm", "ascending_aorta_diameter")]
    cand = [mq(56, "mm", "abdominal_aorta_diameter")]
    assert compare(ref, cand) == ("minor", "size 54 mm -> 56 mm")


def test_prior_values_are_left_out():
    q = "ascending_aorta_diameter"
    # the prior 54 mm is not compared, so nothing crosses: 56 against 56
    assert (
        measurement_errors([mq(54, "mm", q, prior=True), mq(56, "mm", q)], [mq(56, "mm", q)]) == []
    )
    # a prior candidate value is not a partner: the reference 54 mm is simply omitted
    errors = measurement_errors([mq(54, "mm", q)], [mq(56, "mm", q, prior=True)])
    assert [(e.severity, e.reasoning) for e in errors] == [
        ("major", "size 54 mm omitted: ascending_aorta_diameter")
    ]
    assert measurement_errors([mq(54, "mm", q, prior=True)], [mq(56, "mm", q, prior=True)]) == []


def test_unconvertible_sizes_have_no_threshold():
    q = "ascending_aorta_diameter"  # 55 mm is 2.165 in: 2.1 and 2.2 in lie either side
    assert compare([mq(2.1, "in", q)], [mq(2.2, "in", q)]) == ("minor", "size 2.1 in -> 2.2 in")


def test_ratios_in_other_units_and_other_categories_have_no_threshold():
    q = "cardiothoracic_ratio"
    assert (
        severity([mq(0.49, "fraction", q, "ratio")], [mq(0.52, "fraction", q, "ratio")]) == "minor"
    )
    # a value whose category is not its quantity's is not in the quantity's unit
    assert severity([mq(0.49, None, q, "other")], [mq(0.52, None, q, "other")]) == "minor"
    assert (
        severity(
            [mq(54, "mm", "ascending_aorta_diameter", "other")],
            [mq(56, "mm", "ascending_aorta_diameter", "other")],
        )
        == "minor"
    )


def test_equal_values_are_never_an_error():
    q = "lymph_node_short_axis"
    assert measurement_errors([mq(1.0, "cm", q)], [mq(10, "mm", q)]) == []
    assert (
        measurement_errors(
            [mq(50, "%", "cardiothoracic_ratio", "ratio")],
            [mq(0.5, None, "cardiothoracic_ratio", "ratio")],
        )
        == []
    )


# --------------------------------------------------------------------------- pairing tie-break


def test_tie_break_counts_a_threshold_crossing_as_a_major_error():
    q = "ascending_aorta_diameter"
    # 50 -> 60 and 72 -> 60 cost the same (1/6) and both are minor by the size rule, but
    # 50 -> 60 crosses 55 mm: the pairing keeps 72 -> 60 and omits 50 (one major, not two)
    for ref in ([mq(50, "mm", q), mq(72, "mm", q)], [mq(72, "mm", q), mq(50, "mm", q)]):
        errors = measurement_errors(ref, [mq(60, "mm", q)])
        assert sorted((e.severity, e.reasoning) for e in errors) == [
            ("major", "size 50 mm omitted: ascending_aorta_diameter"),
            ("minor", "size 72 mm -> 60 mm"),
        ]
    # without quantities the tie goes to the first value: 50 -> 60, and 72 omitted
    plain = measurement_errors([m(50, "mm"), m(72, "mm")], [m(60, "mm")])
    assert sorted(e.reasoning for e in plain) == ["size 50 mm -> 60 mm", "size 72 mm omitted"]


def test_tie_break_leaves_no_major_error_where_a_pairing_without_one_exists():
    q = "ascending_aorta_diameter"
    # the candidate's 50 and 72 are equally close to 60; only 60 -> 72 stays on one side of 55
    for cand in ([mq(50, "mm", q), mq(72, "mm", q)], [mq(72, "mm", q), mq(50, "mm", q)]):
        errors = measurement_errors([mq(60, "mm", q)], cand)
        assert sorted((e.severity, e.reasoning) for e in errors) == [
            ("minor", "size 50 mm added"),
            ("minor", "size 60 mm -> 72 mm"),
        ]


def test_pairing_by_closeness_is_otherwise_unchanged():
    q = "solid_nodule_diameter"
    # 5.5 -> 6.5 crosses 6 mm, but pairing 5.5 -> 9 instead would be much farther apart
    errors = measurement_errors(
        [mq(5.5, "mm", q), mq(9, "mm", q)], [mq(6.5, "mm", q), mq(9.2, "mm", q)]
    )
    assert sorted((e.severity, e.reasoning) for e in errors) == [
        (
            "major",
            "size 5.5 mm -> 6.5 mm: solid_nodule_diameter crosses >= 6 mm"
            " (Fleischner follow-up categories)",
        ),
        ("minor", "size 9 mm -> 9.2 mm"),
    ]


# --------------------------------------------------------------------------- records and recompute


def aorta_record(pair_id="aorta", quantity="ascending_aorta_diameter"):
    gt = [f("gt_1", sig="urgent", measurements=[mq(5.4, "cm", quantity)])]
    pred = [f("p_1", sig="urgent", measurements=[mq(5.6, "cm", quantity)])]
    return record(pair_id, gt, pred, matching([row("p_1", "gt_1")]))


def test_a_crossing_makes_the_unit_incorrect_and_actionable():
    scored = score_record(aorta_record())
    (unit,) = scored.scores.units
    assert unit.outcome == "INC" and unit.actionable
    assert scored.scores.actionable_errors == 1
    assert scored.scores.attributes["measurement"]["major"] == 1
    before = score_record(aorta_record(quantity=None)).scores
    assert before.units[0].outcome == "PAR" and before.actionable_errors == 0


def test_recompute_applies_the_thresholds_to_stored_records():
    stored = score_record(aorta_record(quantity=None))  # scored as an old record was
    data = json.loads(stored.to_json())
    for side in ("reference_findings", "candidate_findings"):
        data["stages"][side][0]["measurements"][0]["quantity"] = "ascending_aorta_diameter"
    lines = [json.dumps(data) + "\n", stored.to_json() + "\n"]
    out = io.StringIO()
    summary = CorpusSummary()
    assert recompute_lines(lines, out.write, summary) == []
    with_quantity, without = (parse_record(line) for line in out.getvalue().splitlines())
    assert with_quantity.scores.actionable_errors == 1
    assert "crosses >= 55 mm" in with_quantity.scores.units[0].errors[0].reasoning
    assert without.scores == stored.scores  # no quantity: exactly as before


def repo_records():
    """Every record the repository holds or builds for its tests, demos and benchmarks."""
    records = [fig3_record(), *fx.demo_records(), *fx.synthetic_corpus(60, seed=3)]
    for profile, make in PROFILES.items():
        rnd = random.Random(0)
        records += [make(rnd, i) for i in range(40)]
    return records


def test_repository_records_recompute_to_identical_scores():
    records = repo_records()
    for rec in records:
        if rec.error is not None:
            continue
        old = scored_by_legacy(rec)  # the comparator as it was before thresholds
        assert score_record(without_quantities(rec)).scores == old.scores, rec.pair_id
        if not has_quantities(rec):
            new = score_record(rec)
            assert new.scores == old.scores and new.repairs == old.repairs, rec.pair_id
    assert sum(rec.error is None for rec in records) > 150


# --------------------------------------------------------------------------- docs and dashboard


def doc_threshold_table():
    """Rows of the table under step 6 of docs/scoring.md, as lists of cell texts."""
    text = (REPO / "docs" / "scoring.md").read_text(encoding="utf-8")
    step6 = text[text.index("6. **Clinical thresholds") :]
    lines = [line.strip() for line in step6.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("| quantity |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_docs_table_agrees_with_the_data_file():
    source = (REPO / "inference" / "radmatch_audit" / "core" / TABLE_FILE).read_text(encoding="utf-8")
    expected = []
    for entry in csv.DictReader(source.splitlines()):
        suffix = " mm" if entry["unit"] == "mm" else ""
        thresholds = ", ".join(
            f"`{side} {t}{suffix}`"
            for t, side in zip(entry["thresholds"].split(), entry["sides"].split())
        )
        expected.append([f"`{entry['quantity']}`", entry["category"], thresholds, entry["meaning"]])
    assert doc_threshold_table() == expected


def test_dashboard_pair_view_shows_the_threshold_reasoning(tmp_path):
    from radmatch_audit.dashboard import build_dashboard

    src = fx.write_records(tmp_path / "records.jsonl", [score_record(aorta_record())])
    out = tmp_path / "report.html"
    build_dashboard(src, out)
    html = out.read_text("utf-8")
    page = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.DOTALL)
    (pair,) = json.loads(page.group(1))["pairs"]
    (unit,) = pair["detail"]["units"]
    reasons = [e["reasoning"] for e in unit["errors"]]
    assert (
        "size 54 mm -> 56 mm: ascending_aorta_diameter crosses >= 55 mm (surgical repair threshold)"
        in reasons
    )
    measured = [m_ for fnd in pair["detail"]["findings"] for m_ in fnd["measurements"]]
    assert {m_["quantity"] for m_ in measured} == {"ascending_aorta_diameter"}


def test_the_table_needs_one_known_side_per_threshold():
    head = "quantity,category,unit,thresholds,sides,meaning\n"
    table = parse_table(head + "x,size,mm,8 6,> >=,a; b\n")
    assert table["x"].thresholds == (6.0, 8.0) and table["x"].sides == (">=", ">")  # kept aligned
    for sides in (">=", "> > >", "=> >", ">= <"):
        with pytest.raises(ValueError, match=r"clinical_thresholds.csv line 2: give one side"):
            parse_table(head + f"x,size,mm,6 8,{sides},a\n")
