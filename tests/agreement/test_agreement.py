"""`radmatch-audit agreement`: statistics against scipy, the clustered bootstrap, blocked tau-b by
hand, the RadPref loader by hand, the ReXVal and RadEvalExpert column checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from radmatch_audit.agreement import AnnotationError, load_annotations
from radmatch_audit.agreement import stats as agreement_stats
from radmatch_audit.agreement.annotations import AnnotationSet, Case, Endpoint
from radmatch_audit.agreement.methods import MethodScores
from radmatch_audit.agreement.radevalexpert import load_radevalexpert, parse_cell
from radmatch_audit.agreement.report import compare, preference, to_markdown
from radmatch_audit.agreement.rexval import load_rexval
from radmatch_audit.agreement.stats import agreement, blocked_tau_b, kendall_tau_b, pearson_r
from radmatch_audit.read.resampling import group_by_study

RADPREF = Path(__file__).resolve().parents[1] / "data" / "radpref"  # shipped: see its README.md


# --------------------------------------------------------------------------- statistics


def test_tau_b_and_r_match_scipy_on_data_with_ties():
    metric = [0, 1, 1, 2, 3, 3, 5, 2, 0, 4]
    radiologists = [0.5, 1, 2, 2, 2.5, 4, 4, 1, 0, 3]
    assert kendall_tau_b(metric, radiologists) == pytest.approx(
        scipy_stats.kendalltau(metric, radiologists, variant="b").statistic)
    assert pearson_r(metric, radiologists) == pytest.approx(
        scipy_stats.pearsonr(metric, radiologists).statistic)


def test_tau_b_by_hand():
    # pairs (1,2) concordant, (1,3) concordant, (2,3) discordant: (2 - 1) / 3
    assert kendall_tau_b([0, 1, 2], [0, 2, 1]) == pytest.approx(1 / 3)


def test_constant_side_has_no_correlation():
    assert math.isnan(kendall_tau_b([1, 1, 1], [0, 1, 2]))
    assert math.isnan(pearson_r([1, 2, 3], [4, 4, 4]))


def test_blocked_tau_b_by_hand():
    #  study A: metric 0 1 2 vs radiologists 0 2 1 -> C=2, D=1: tau 1/3, 3 candidate pairs
    #  study B: metric 3 1 2 vs 2 0 1 -> same order: tau 1, 3 pairs
    #  study C: metric 1 1 1 -> all tied: no tau, left out
    #  study D: metric 0 1 vs 1 0 -> tau -1, 1 pair
    #  blocked = (3 * 1/3 + 3 * 1 + 1 * -1) / (3 + 3 + 1) = 3/7
    metric = [0, 1, 2, 3, 1, 2, 1, 1, 1, 0, 1]
    radiologists = [0, 2, 1, 2, 0, 1, 0, 1, 2, 1, 0]
    studies = ["A"] * 3 + ["B"] * 3 + ["C"] * 3 + ["D"] * 2
    assert blocked_tau_b(metric, radiologists, studies) == pytest.approx(3 / 7)
    result = agreement(metric, radiologists, studies, n_resamples=200)
    assert result.blocked_tau_b.value == pytest.approx(3 / 7)
    assert result.blocked_tau_b.blocks == 3 and result.blocked_tau_b.n == 8
    low, high = result.blocked_tau_b.ci
    assert -1 <= low <= 3 / 7 <= high <= 1


def test_bootstrap_keeps_a_studys_candidates_together(monkeypatch):
    drawn: list[np.ndarray] = []
    real = agreement_stats.resample_studies

    def spying(clusters, n_resamples, seed):
        for idx in real(clusters, n_resamples, seed):
            drawn.append(np.array(idx))
            yield idx

    monkeypatch.setattr(agreement_stats, "resample_studies", spying)
    studies = ["s1", "s1", "s1", "s2", "s2", "s3", "s4", "s4", "s4", "s4"]
    rng = np.random.default_rng(1)
    metric, target = rng.integers(0, 5, 10), rng.integers(0, 5, 10)
    agreement(metric, target, studies, n_resamples=50)
    assert len(drawn) == 50
    clusters = group_by_study(studies)
    for idx in drawn:
        counts = np.bincount(idx, minlength=10)
        for members in clusters:  # every candidate of a study drawn equally often
            assert len(set(counts[members])) == 1
        assert sum(counts[m[0]] for m in clusters) == len(clusters)  # as many studies as there are


def test_each_resamples_statistics_equal_scipy_on_the_resampled_pairs():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 5, 24).astype(float), rng.integers(0, 5, 24).astype(float)
    clusters = group_by_study([i // 3 for i in range(24)])
    draws = list(agreement_stats.resample_studies(clusters, 20, 0))
    counts = agreement_stats.multiplicities(clusters, 24, 20, 0)
    taus = agreement_stats.tau_b_draws(x, y, counts)
    rs = agreement_stats.pearson_draws(x, y, counts)
    for k, idx in enumerate(draws):
        assert taus[k] == pytest.approx(scipy_stats.kendalltau(x[idx], y[idx], variant="b").statistic)
        assert rs[k] == pytest.approx(scipy_stats.pearsonr(x[idx], y[idx]).statistic)


def test_bootstrap_is_seeded_and_reproducible():
    rng = np.random.default_rng(7)
    metric, target = rng.integers(0, 6, 40), rng.integers(0, 6, 40)
    studies = [f"s{i // 4}" for i in range(40)]
    a = agreement(metric, target, studies, n_resamples=300).to_dict()
    b = agreement(metric, target, studies, n_resamples=300).to_dict()
    c = agreement(metric, target, studies, n_resamples=300, seed=5).to_dict()
    assert a == b
    assert a["tau_b"]["ci95"] != c["tau_b"]["ci95"]
    assert a["tau_b"]["paper_sign"] == -a["tau_b"]["value"]


# --------------------------------------------------------------------------- RadPref


def test_radpref_counts_by_hand_for_three_cases():
    ann = load_annotations(str(RADPREF), "radpref")
    cases = json.loads((RADPREF / "preference_data.json").read_text(encoding="utf-8"))
    first, second, third = cases[0]["id"], cases[1]["id"], cases[10]["id"]

    def t(case_id, slot):
        return ann.cases[f"{case_id}/{slot}"]

    # Case 1, C1. Radiologist 1: false finding (actionable_not_urgent) = 1 significant;
    # missing: not_actionable, actionable, not_actionable = 3, 1 significant -> total 4,
    # significant 2. Radiologist 2: an attribute error {overinterpretation: significant}
    # = 1 significant, the same 3 missing (1 significant) -> 4 / 2. Radiologist 3 as 1.
    # Mean: total 4, significant 2, false (1+0+1)/3, missing 1, attribute (0+1+0)/3.
    # Ratings 2, 2, 2.
    c = t(first, "C1")
    assert c.targets["total"] == 4 and c.targets["significant"] == 2
    assert c.targets["false"] == pytest.approx(2 / 3) and c.targets["missing"] == 1
    assert c.targets["attribute"] == pytest.approx(1 / 3) and c.rating == 2
    # C2: each radiologist one attribute error {location: significant}: 1 / 1; ratings 4, 4, 3.
    c = t(first, "C2")
    assert (c.targets["total"], c.targets["significant"], c.targets["attribute"]) == (1, 1, 1)
    assert c.rating == pytest.approx(11 / 3)
    # Case 2, C1: nobody marked anything, all rated 5.
    c = t(second, "C1")
    assert c.targets["total"] == 0 and c.rating == 5
    # C2: missing (actionable, not_actionable) for radiologists 1 and 2 -> 2 / 1;
    # radiologist 3 (actionable, actionable) -> 2 / 2. Mean total 2, significant 4/3.
    c = t(second, "C2")
    assert c.targets["total"] == 2 and c.targets["significant"] == pytest.approx(4 / 3)
    assert c.targets["missing"] == pytest.approx(4 / 3)
    assert [c.targets[f"significant_r{k}"] for k in (1, 2, 3)] == [1, 1, 2]
    # Case 3 (an attribute error naming several attributes), C2. Radiologists 1 and 2:
    # {location: significant} = 1 significant + a false finding not_actionable = 1 -> 2 / 1.
    # Radiologist 3: {location: significant, temporal: negligible, severity: negligible} =
    # 3 errors, 1 significant, + a false finding actionable_not_urgent -> 4 / 2.
    # Mean total 8/3, significant 4/3, false 1/3, attribute 1.
    c = t(third, "C2")
    assert c.targets["total"] == pytest.approx(8 / 3)
    assert c.targets["significant"] == pytest.approx(4 / 3)
    assert c.targets["false"] == pytest.approx(1 / 3) and c.targets["attribute"] == 1
    # C1: radiologist 1 nothing; 2 a false not_actionable (1 / 0); 3 {temporal, descriptor:
    # negligible} (2 / 0) + a false not_actionable (1 / 0). Mean total (0+1+3)/3, significant 0.
    c = t(third, "C1")
    assert c.targets["total"] == pytest.approx(4 / 3) and c.targets["significant"] == 0


def _malform(annotations: dict, how: str) -> None:
    """Break the first case's C1 annotation of one radiologist the way `how` says."""
    case = next(iter(annotations))
    c1 = annotations[case]["C1"]
    if how == "candidates as a list":
        annotations[case] = [annotations[case]["C1"], annotations[case]["C2"]]
    elif how == "finding_errors as a list":
        c1["finding_errors"] = list(c1["finding_errors"].values())
    elif how == "an error as a string":
        c1["finding_errors"] = {"1": "false finding"}
    elif how == "missing_findings as a list":
        c1["missing_findings"] = list(c1["missing_findings"].values())
    elif how == "attributes as a list":
        c1["finding_errors"] = {"1": {"error_type": "attribute", "attributes": ["location"]}}


MALFORMED_RADPREF = ["candidates as a list", "finding_errors as a list", "an error as a string",
                     "missing_findings as a list", "attributes as a list"]


@pytest.mark.parametrize("how", MALFORMED_RADPREF)
def test_a_malformed_radpref_file_is_one_error_line_naming_it(tmp_path, capsys, how):
    """Issue 36, item 16: lists where objects belong, an error given as a string: the
    loader names the file and the case, and `agreement` (with --emit-pairs too) exits 2
    with one line, never a traceback."""
    import shutil

    from radmatch_audit.cli import main

    folder = tmp_path / "radpref"
    shutil.copytree(RADPREF, folder)
    user = folder / "user_2.json"
    doc = json.loads(user.read_text(encoding="utf-8"))
    _malform(doc["annotations"], how)
    user.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(AnnotationError, match=f"user_2.json: case {next(iter(doc['annotations']))}"):
        load_annotations(str(folder), "radpref")
    for extra in (["--emit-pairs", str(tmp_path / "pairs.jsonl")], [str(tmp_path / "none.jsonl")]):
        assert main(["agreement", "--annotations", str(folder), *extra]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert str(user) in err
    assert not (tmp_path / "pairs.jsonl").exists()


def test_radpref_pairs_join_the_annotations():
    ann = load_annotations(str(RADPREF), "radpref")
    rows = list(ann.pair_rows())
    assert len(rows) == 22 and len(ann.comparisons) == 11
    assert {r["pair_id"] for r in rows} == set(ann.cases)
    assert all(r["pair_id"].startswith(r["study_id"] + "/") for r in rows)
    assert all(r["modality"] == "chest_xray" and r["indication"] for r in rows)


def _toy_set() -> AnnotationSet:
    cases = {}
    ratings = {"a/C1": 5, "a/C2": 2, "b/C1": 1, "b/C2": 4, "c/C1": 3, "c/C2": 3, "d/C1": 4, "d/C2": 1}
    for pid, rating in ratings.items():
        cases[pid] = Case(pid, pid.split("/")[0], {"total": 5 - rating}, rating)
    comparisons = [(f"{s}/C1", f"{s}/C2") for s in "abcd"]
    return AnnotationSet("toy", [Endpoint("total", "total errors")], cases, raters=1, comparisons=comparisons)


def test_preference_accuracy_by_hand():
    ann = _toy_set()
    # study a: radiologists prefer C1, the metric too (0 < 3 errors): agree
    # study b: prefer C2; metric 1 vs 1: a tie, counted as not agreeing
    # study c: rated equally: left out
    # study d: prefer C1; metric prefers C2 (2 > 0): disagree
    method = MethodScores("m", "m.jsonl", {"a/C1": 0, "a/C2": 3, "b/C1": 1, "b/C2": 1,
                                           "c/C1": 0, "c/C2": 1, "d/C1": 2, "d/C2": 0})
    result = preference(ann, method)
    assert (result["cases"], result["agree"], result["metric_ties"], result["radiologist_ties"]) == (3, 1, 1, 1)
    assert result["accuracy"] == pytest.approx(1 / 3, abs=1e-4)
    low, high = result["ci95"]
    assert low < 1 / 3 < high


def test_compare_and_markdown_name_every_method_and_endpoint():
    ann = _toy_set()
    perfect = MethodScores("perfect", "p", {pid: c.targets["total"] for pid, c in ann.cases.items()})
    partial = MethodScores("partial", "q", {"a/C1": 0, "a/C2": 3, "b/C1": 1})
    report = compare(ann, [perfect, partial], n_resamples=100)
    tau = report["endpoints"][0]["results"]["perfect"]["tau_b"]
    assert tau["value"] == 1.0 and tau["n"] == 8
    assert report["endpoints"][0]["results"]["partial"]["tau_b"]["n"] == 3
    common = compare(ann, [perfect, partial], common=True, n_resamples=100)
    assert common["endpoints"][0]["results"]["perfect"]["tau_b"]["n"] == 3
    text = to_markdown(report)
    assert "| total errors | perfect | 8 † | 1.00" in text and "partial" in text
    assert "Pairwise preference" in text


def test_intervals_from_fewer_than_ten_studies_carry_a_caution():
    from radmatch_audit.agreement.report import MIN_STUDIES

    ann = _toy_set()  # 4 studies of 2 candidates
    perfect = MethodScores("perfect", "p", {pid: c.targets["total"] for pid, c in ann.cases.items()})
    result = compare(ann, [perfect], n_resamples=100)["endpoints"][0]["results"]["perfect"]
    assert MIN_STUDIES == 10 and result["studies"] == 4
    assert result["caution"].startswith("4 studies, fewer than 10")
    text = to_markdown(compare(ann, [perfect], n_resamples=100))
    assert "caution: † marks 1 row(s) whose intervals rest on fewer than 10 studies" in text
    assert "docs/agreement.md" in text

    big = {f"s{k}/C{j}": Case(f"s{k}/C{j}", f"s{k}", {"total": k % 4 + j}, 3)
           for k in range(12) for j in (1, 2)}
    ann12 = AnnotationSet("big", [Endpoint("total", "total errors")], big, raters=1)
    method = MethodScores("m", "m", {pid: c.targets["total"] for pid, c in big.items()})
    result = compare(ann12, [method], n_resamples=100)["endpoints"][0]["results"]["m"]
    assert result["studies"] == 12 and result["blocked_tau_b"]["blocks"] >= MIN_STUDIES
    assert "caution" not in result and "caution" not in to_markdown(compare(ann12, [method], n_resamples=100))


# --------------------------------------------------------------------------- ReXVal


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def _rexval(tmp_path: Path, rater_header=None) -> Path:
    _write_csv(tmp_path / "50_samples_gt_and_candidates.csv",
               ["study_id", "gt_report", "radgraph", "bertscore", "s_emb", "bleu"],
               [["s100", "ref A", "c1", "c2", "c3", "c4"], ["s200", "ref B", "d1", "d2", "d3", "d4"]])
    _write_csv(tmp_path / "6_valid_raters_per_rater_error_categories.csv",
               rater_header or ["study_number", "candidate_type", "rater_index", "error_category",
                                "clinically_significant", "num_errors"],
               [[0, "radgraph", 1, 1, "True", 2], [0, "radgraph", 1, 2, "False", 1],
                [0, "radgraph", 2, 2, "True", 1], [1, "bleu", 2, 6, "True", 3]])
    return tmp_path


def test_rexval_counts_are_means_over_the_files_raters(tmp_path):
    ann = load_rexval(_rexval(tmp_path))
    assert ann.raters == 2 and len(ann.cases) == 8
    c = ann.cases["s100/radgraph"]
    # rater 1: 2 significant (cat 1) + 1 insignificant; rater 2: 1 significant (cat 2)
    assert c.targets["total"] == 2 and c.targets["significant"] == 1.5
    assert c.targets["insignificant"] == 0.5 and c.targets["category_1"] == 1
    assert ann.cases["s200/bleu"].targets["category_6"] == 1.5
    assert ann.cases["s200/radgraph"].targets["total"] == 0
    assert {r["pair_id"] for r in ann.pair_rows()} == set(ann.cases)


def test_rexval_column_mismatch_says_what_is_missing(tmp_path):
    folder = _rexval(tmp_path, rater_header=["study", "candidate_type", "rater_index",
                                             "error_category", "clinically_significant", "num_errors"])
    with pytest.raises(AnnotationError) as info:
        load_rexval(folder)
    message = str(info.value)
    assert "6_valid_raters_per_rater_error_categories.csv" in message
    assert "missing ['study_number']" in message and "unexpected ['study']" in message
    assert "ReXVal 1.0.0" in message


def test_rexval_missing_file_names_the_download(tmp_path):
    with pytest.raises(AnnotationError, match="50_samples_gt_and_candidates.csv.*PhysioNet"):
        load_rexval(tmp_path)


# --------------------------------------------------------------------------- RadEvalExpert

REE_COLUMNS = ["annotator", "type", "ground_truth", "images_path", "prediction1", "prediction2",
               "prediction3", "annotation1", "annotation2", "annotation3"]


def test_radevalexpert_column_mismatch_says_what_is_missing(tmp_path):
    path = tmp_path / "ree.csv"
    _write_csv(path, [c if c != "annotation3" else "annotation_3" for c in REE_COLUMNS], [])
    with pytest.raises(AnnotationError) as info:
        load_radevalexpert(path)
    assert "missing ['annotation3']" in str(info.value) and "RadEvalExpert" in str(info.value)


def test_radevalexpert_cells_read_as_text_or_json(tmp_path):
    text = "Significant errors:\n1. False prediction of finding: 2\n3. Incorrect location: 1\n" \
           "Insignificant errors:\n7. Inarticulate: 1\n"
    as_json = json.dumps({"significant": {"2": 1}, "insignificant": {}})
    assert parse_cell(text) == {"significant": {1: 2.0, 3: 1.0}, "insignificant": {7: 1.0}}
    assert parse_cell(as_json) == {"significant": {2: 1.0}, "insignificant": {}}
    assert parse_cell("") is None and parse_cell("looks fine to me") is None
    path = tmp_path / "ree.csv"
    _write_csv(path, REE_COLUMNS, [["r1", "findings", "ref", "img/1", "p1", "p2", "p3", text, as_json, ""]])
    ann = load_radevalexpert(path)
    assert set(ann.cases) == {"radevalexpert-0/1", "radevalexpert-0/2"}  # the blank cell is left out
    c = ann.cases["radevalexpert-0/1"]
    assert c.targets["significant"] == 3 and c.targets["total"] == 4
    assert c.targets["significant_findings"] == 3 and "significant_impression" not in c.targets
    assert ann.notes and "1 annotation cell" in ann.notes[0]


def test_radevalexpert_with_no_readable_cell_fails(tmp_path):
    path = tmp_path / "ree.csv"
    _write_csv(path, REE_COLUMNS, [["r1", "findings", "ref", "img/1", "p1", "p2", "p3", "?", "?", "?"]])
    with pytest.raises(AnnotationError, match="none of the 3 annotation cells"):
        load_radevalexpert(path)


# --------------------------------------------------------------------------- RadMatch's two counts


def _radmatch_line(pair_id: str, actionable: int, significant: int, state: str = "current") -> str:
    """A RadMatch record with `actionable` urgent misses whose adjudication found
    `significant` errors (as unlisted ones); `state` "off" writes it as version 3."""
    from builders import adjudicated, f, matching, record, version3_line

    from radmatch_audit.read.recompute import score_record

    gt = [f(f"gt_{i}", sig="urgent") for i in range(actionable)] or [f("gt_0", status="normal")]
    rec = record(pair_id, gt, [], matching([], [], [g.id for g in gt]))
    if state == "off":
        return version3_line(score_record(rec))
    rec = adjudicated(rec, errors=[0] * (actionable or 1), unlisted=("an error",) * significant,
                      state=state)
    return rec.to_json()


def test_a_radmatch_file_gives_its_significant_and_actionable_counts_as_two_methods(tmp_path):
    from radmatch_audit.agreement.methods import read_methods

    ann = _toy_set()  # the radiologists' total: 5 - rating
    path = tmp_path / "radmatch.jsonl"
    lines = [_radmatch_line(pid, actionable=0 if pid.endswith("C1") else 2,
                            significant=int(case.targets["total"]),
                            state="stale" if pid == "d/C2" else "current")
             for pid, case in ann.cases.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    significant, actionable = read_methods(str(path))
    assert (significant.label, actionable.label) == ("radmatch-significant", "radmatch")
    assert significant.errors == {pid: c.targets["total"] for pid, c in ann.cases.items() if pid != "d/C2"}
    assert significant.failed == 1 and actionable.failed == 0 and len(actionable.errors) == 8
    assert actionable.errors["a/C2"] == 2 and actionable.errors["a/C1"] == 0
    report = compare(ann, [significant, actionable], n_resamples=100)
    results = report["endpoints"][0]["results"]
    assert results["radmatch-significant"]["tau_b"]["value"] == 1.0
    assert results["radmatch-significant"]["tau_b"]["n"] == 7
    assert results["radmatch"]["tau_b"]["n"] == 8 and results["radmatch"]["tau_b"]["value"] < 1
    assert any("radmatch-significant: 1 scored pair(s) whose error adjudication does not stand"
               in note for note in report["notes"])
    text = to_markdown(report)
    assert "| total errors | radmatch-significant | 7 † | 1.00" in text
    assert "| radmatch-significant | 7 | 1 | 0 |" in text
    assert read_methods(str(path), "mine")[0].label == "mine-significant"


def test_records_without_adjudication_give_one_method_and_say_significant_is_not_available(tmp_path):
    from radmatch_audit.agreement.methods import read_methods

    path = tmp_path / "old.jsonl"
    path.write_text(_radmatch_line("a/C1", 1, 0, state="off") + "\n"
                    + _radmatch_line("a/C2", 2, 0, state="off") + "\n", encoding="utf-8")
    (method,) = read_methods(str(path))
    assert method.label == "radmatch" and method.errors == {"a/C1": 1, "a/C2": 2}
    report = compare(_toy_set(), [method], n_resamples=100)
    assert any(note.startswith("radmatch: no pair's error adjudication stands") and
               "significant errors are not available" in note for note in report["notes"])
