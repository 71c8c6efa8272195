"""Scoring contract 3 (2026-12-02), each rule on both sides of its boundary.

1. An SPU unit whose findings are all normal is not actionable (docs/scoring.md 5).
2. `position` values: mm like sizes, their own family, never a major error (4, step 3-5).
3. An omitted reference value is major only when it carries a quantity (4, step 5).
4. Each clinical threshold has a side, >= or > (4, step 6).

And records written before the change (commit bdb6a1e) recompute to scores that differ
only where one of these rules, or contract 4's (2026-12-05: an actionable INC unit counts
each inverted finding), applies: scripts/contract_changes.py explains each unit.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from builders import f, matching, record, row
from radmatch_audit.read.recompute import score_record
from radmatch_audit.core.schemas import (
    CANONICAL_LIMITS,
    SERVER_LIMITS,
    SMALL_MODEL_LIMITS,
    Measurement,
    answer_models,
)
from radmatch_audit.scoring.comparators import measurement_errors, normalise
from radmatch_audit.core.thresholds import parse_table

REPO = Path(__file__).resolve().parents[2]
OLD_RECORDS = REPO / "tests" / "data" / "records_bdb6a1e.jsonl.gz"
TIERS = ("critical", "urgent", "notable", "routine")
ACTIONABLE = ("critical", "urgent", "notable")


def load_script():
    spec = importlib.util.spec_from_file_location(
        "contract_changes", REPO / "scripts" / "contract_changes.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def mq(value, unit, quantity=None, category="size", prior=False):
    return Measurement(value=value, unit=unit, category=category, prior=prior, quantity=quantity)


def pos(value, unit, quantity=None):
    return mq(value, unit, quantity, category="position")


def found(ref, cand):
    """[(severity, reasoning)] of the measurement errors, sorted."""
    return sorted((e.severity, e.reasoning) for e in measurement_errors(ref, cand))


# --------------------------------------------------------------------------- rule 1


def spu_record(*statuses_and_tiers):
    pred = [f(f"p_{i}", status, tier) for i, (status, tier) in enumerate(statuses_and_tiers, 1)]
    return record("spu", [], pred, matching([], unmatched_pred=[p.id for p in pred]))


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


# --------------------------------------------------------------------------- rule 2


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


def test_a_position_difference_alone_makes_the_unit_partial_not_incorrect():
    gt = [f("gt_1", sig="critical", measurements=[pos(1, "cm")])]
    pred = [f("p_1", sig="critical", measurements=[pos(1.5, "cm")])]
    scores = score_record(record("ett", gt, pred, matching([row("p_1", "gt_1")]))).scores
    (unit,) = scores.units
    assert (unit.outcome, unit.actionable, scores.actionable_errors) == ("PAR", False, 0)


@pytest.mark.parametrize("limits", [CANONICAL_LIMITS, SERVER_LIMITS, SMALL_MODEL_LIMITS])
def test_every_answer_profile_admits_position(limits):
    extract = answer_models(limits).extract
    schema = json.dumps(extract.model_json_schema())
    assert '"position"' in schema  # what the server and small-model grammars are built from
    finding = {"text": "Endotracheal tube tip 5 cm above the carina.", "clinical_status": "abnormal",
               "clinical_significance": "routine", "comparison": None, "evidence": ["ETT"],
               "measurements": [{"value": 5, "unit": "cm", "category": "position"}]}
    assert extract.model_validate({"findings": [finding]})


def test_records_store_and_read_position_values():
    rec = score_record(record("p", [f("gt_1", measurements=[pos(5, "cm")])],
                              [f("p_1", measurements=[pos(3, "cm")])], matching([row("p_1", "gt_1")])))
    from radmatch_audit.files.record_io import parse_record

    again = parse_record(rec.to_json())
    assert again.stages.candidate_findings[0].measurements[0].category == "position"
    assert again.scores == rec.scores


# --------------------------------------------------------------------------- rule 3


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


@pytest.mark.parametrize("quantity, outcome", [(None, "PAR"), ("lymph_node_short_axis", "INC")])
def test_omitted_value_sets_the_outcome_by_its_quantity(quantity, outcome):
    # "moderate pneumothorax" against the same with "lung edge 3 cm from the apex"
    gt = [f("gt_1", sig="critical", measurements=[mq(3, "cm", quantity)])]
    pred = [f("p_1", sig="critical")]
    scores = score_record(record("o", gt, pred, matching([row("p_1", "gt_1")]))).scores
    assert scores.units[0].outcome == outcome
    assert scores.actionable_errors == (outcome == "INC")


# --------------------------------------------------------------------------- rule 4


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


def test_the_table_needs_one_known_side_per_threshold():
    head = "quantity,category,unit,thresholds,sides,meaning\n"
    table = parse_table(head + "x,size,mm,8 6,> >=,a; b\n")
    assert table["x"].thresholds == (6.0, 8.0) and table["x"].sides == (">=", ">")  # kept aligned
    for sides in (">=", "> > >", "=> >", ">= <"):
        with pytest.raises(ValueError, match=r"clinical_thresholds.csv line 2: give one side"):
            parse_table(head + f"x,size,mm,6 8,{sides},a\n")


# --------------------------------------------------------------------------- old records


@pytest.fixture(scope="module")
def recomputed(tmp_path_factory):
    """The records written at bdb6a1e, and the same after `radmatch-audit recompute` (the CLI)."""
    from radmatch_audit.cli import main
    from radmatch_audit.files.record_io import parse_record

    script = load_script()
    folder = tmp_path_factory.mktemp("old")
    src, out = folder / "old.jsonl", folder / "new.jsonl"
    src.write_bytes(gzip.decompress(OLD_RECORDS.read_bytes()))
    assert main(["recompute", str(src), "-o", str(out), "--json"]) == 0
    old = [parse_record(line) for line in script.jsonl_lines(src.read_text("utf-8"))]
    new = [parse_record(line) for line in script.jsonl_lines(out.read_text("utf-8"))]
    return script, old, new


def test_old_records_change_only_where_a_rule_applies(recomputed):
    script, old, new = recomputed
    assert len(old) == len(new) > 250 and [r.pair_id for r in old] == [r.pair_id for r in new]
    tallies, problems = script.tally(old, new)
    assert problems == []
    # the file holds cases of rules 1, 3 and 4 (records before the change hold no position)
    assert tallies[1].units > 0 and tallies[3].units > 0 and tallies[4].units > 0
    assert tallies[2].units == 0
    assert tallies[1].moved == tallies[1].units  # rule 1 always moves the actionable flag
    # contract 4: some stored INC units hold two inverted findings, and count them now
    assert tallies[5].units == tallies[5].moved == len(tallies[5].pairs) > 0
    assert tallies[5].delta >= tallies[5].units


def test_a_count_no_rule_explains_fails_the_check(recomputed):
    """A unit whose actionable_errors moved with no inverted finding to explain it fails,
    even in a pair whose other units a rule explains."""
    script, old, new = recomputed
    tampered = 0
    for a, b in zip(old, new):
        changed = script.explain_record(a, b) if b.scores else {}
        still = [u for u in b.scores.units if script._key(u) not in changed and u.actionable] if b.scores else []
        if not changed or not still:
            continue
        still[0].actionable_errors += 1
        b.scores.actionable_errors += 1
        with pytest.raises(script.Unexplained, match="actionable_errors"):
            script.explain_record(a, b)
        tampered += 1
        if tampered == 3:
            break
    assert tampered == 3


def test_the_check_fails_on_a_change_no_rule_explains(recomputed):
    script, old, new = recomputed
    tampered = 0
    for a, b in zip(old, new):
        if b.scores is None:
            continue
        for unit in b.scores.units:
            if unit.kind == "matched" and unit.outcome == "COR":
                unit.outcome, unit.actionable = "INC", True
                with pytest.raises(script.Unexplained, match=re.escape(repr(b.pair_id))):
                    script.explain_record(a, b)
                tampered += 1
                break
        if tampered == 3:
            break
    assert tampered == 3


def test_boundary_probes_move_as_each_rule_says(recomputed):
    _, old, new = recomputed
    by_id = {b.pair_id: (a, b) for a, b in zip(old, new)}

    def actionable(pair_id):
        a, b = by_id[f"probe-{pair_id}"]
        return a.scores.actionable_errors, b.scores.actionable_errors

    assert actionable("spu-normal-urgent") == (1, 0)
    assert actionable("spu-abnormal-urgent") == (1, 1)
    assert actionable("spu-mixed-notable") == (2, 1)
    assert actionable("spu-normal-routine") == (0, 0)
    assert actionable("omitted-no-quantity") == (1, 0)
    assert actionable("omitted-quantity") == (1, 1)
    # 6 mm against 5.5 mm: below 6 before (> 6), at 6 is in the 6-8 group now (>= 6)
    assert actionable("threshold-solid_nodule_diameter-6-mm-5.5") == (0, 1)
    assert actionable("threshold-solid_nodule_diameter-6-mm-6.5") == (1, 0)
    assert actionable("threshold-cardiothoracic_ratio-0.5-%-49") == (0, 0)  # > 0.50 as before


def version_3_line(rec, pair_id: str) -> str:
    """`rec` as a version-3 records line: scored before contract 4, one error per actionable unit."""
    data = json.loads(rec.to_json())
    data["schema_version"], data["pair_id"] = 3, pair_id
    scores = data["scores"]
    for unit in scores["units"]:
        del unit["actionable_errors"], unit["significant_errors"]
    for key in ("significant_errors", "adjudication", "unlisted_errors"):
        del scores[key]
    scores["actionable_errors"] = sum(u["actionable"] for u in scores["units"])
    return json.dumps(data) + "\n"


def umbrella(second_status: str = "abnormal"):
    """"Lungs are clear." (normal) matched to two candidate consolidations."""
    gt = [f("gt_1", status="normal", sig="urgent")]
    pred = [f("p_1", sig="urgent"), f("p_2", status=second_status, sig="urgent")]
    return record("umbrella", gt, pred, matching([row("p_1", "gt_1"), row("p_2", "gt_1")]))


def test_rule_5_explains_a_version_3_record_that_contract_4_moves(tmp_path, capsys):
    script = load_script()
    path = tmp_path / "v3.jsonl"
    path.write_text(version_3_line(score_record(umbrella()), "two-inverted")
                    + version_3_line(score_record(umbrella("normal")), "one-inverted"), "utf-8")
    old, new = script.recompute_file(path)
    tallies, problems = script.tally(old, new)
    assert problems == []
    assert (tallies[5].units, tallies[5].moved, tallies[5].pairs, tallies[5].delta) == (1, 1, {"two-inverted"}, 1)
    assert all(tallies[rule].units == 0 for rule in (1, 2, 3, 4))
    assert script.main([str(path)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"5 INC counts each inverted finding +2026-12-05 +1 +1 +1 +1\.000 -> 1\.500", table)


def test_the_script_exits_1_naming_a_pair_whose_change_no_rule_explains(tmp_path, capsys):
    script = load_script()
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(version_3_line(score_record(umbrella()), "two-inverted"), "utf-8")
    data = json.loads(version_3_line(score_record(umbrella("normal")), "counted-twice"))
    data["scores"]["units"][0]["actionable_errors"] = 2  # one inverted finding, counted twice
    data["scores"]["actionable_errors"] = 2
    bad.write_text(json.dumps(data) + "\n", "utf-8")
    assert script.main([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "good.jsonl:" in out and "bad.jsonl:" in out
    (line,) = [x for x in out.splitlines() if x.startswith("UNEXPLAINED:")]
    assert "'counted-twice'" in line and "actionable_errors 2 -> 1" in line


# --------------------------------------------------------------------------- what users see


def test_the_dashboard_names_an_unaddressed_negative_and_a_threshold_side(tmp_path):
    import dashboard_fixtures as fx
    from radmatch_audit.dashboard import build_dashboard

    negative = score_record(spu_record(("normal", "urgent"), ("abnormal", "urgent")))
    gt = [f("gt_1", sig="notable", measurements=[mq(6, "mm", "solid_nodule_diameter")])]
    pred = [f("p_1", sig="notable", measurements=[mq(5, "mm", "solid_nodule_diameter")])]
    nodule = score_record(record("nodule", gt, pred, matching([row("p_1", "gt_1")])))
    src = fx.write_records(tmp_path / "records.jsonl", [negative, nodule])
    out = tmp_path / "report.html"
    build_dashboard(src, out)
    html = out.read_text("utf-8")
    page = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.DOTALL)
    pairs = {p["id"]: p for p in json.loads(page.group(1))["pairs"]}
    units = pairs["spu"]["detail"]["units"]
    assert [(u["unaddressed_negative"], u["actionable"]) for u in units] == [
        (True, False),
        (False, True),
    ]
    assert "unaddressed negative, not an error" in html  # the label the page renders
    (unit,) = pairs["nodule"]["detail"]["units"]
    assert "solid_nodule_diameter crosses >= 6 mm" in unit["errors"][0]["reasoning"]


def test_docs_log_the_contract_changes():
    text = (REPO / "docs" / "scoring.md").read_text("utf-8")
    log = text[text.index("## Contract changes"):].lower()
    assert "2026-12-02" in log
    for words in ("unaddressed negative", "`position`", "quantity", "`>=`", "side"):
        assert words in log, words
    readme = (REPO / "README.md").read_text("utf-8")
    assert "docs/scoring.md#contract-changes" in readme


def test_the_records_shown_in_the_docs_recompute_with_every_change_explained():
    from radmatch_audit.files.record_io import parse_record

    script = load_script()
    shown = 0
    for doc in sorted((REPO / "docs").glob("*.md")):
        for block in re.findall(r"```json\n(.*?)```", doc.read_text("utf-8"), re.DOTALL):
            if '"schema_version"' not in block:
                continue
            stored = parse_record(block)
            script.explain_record(stored, score_record(stored))  # raises on an unexplained change
            shown += 1
    assert shown >= 1


def test_compare_counts_an_unaddressed_negative_in_no_actionable_tier():
    from radmatch_audit.read.compare import TOTAL, tier_errors

    counts = tier_errors(score_record(spu_record(("normal", "urgent"), ("abnormal", "notable"),
                                                 ("normal", "routine"))))
    assert (counts["urgent"], counts["notable"], counts["routine"], counts[TOTAL]) == (0, 1, 1, 1)
