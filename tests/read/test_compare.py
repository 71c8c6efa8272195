"""`radmatch-audit compare`: the paired statistics against known data, and the command."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from builders import adjudicated, f, matching, record, spu_record, version3_line
from radmatch_audit.read.compare import (
    compare_records,
    format_comparison,
    sign_flip_p_values,
    tier_errors,
)
from radmatch_audit.read.recompute import score_record
from radmatch_audit.files.record_io import RecordWriter
from radmatch_audit.read.resampling import group_by_study, mean_interval


def scored(pair_id: str, study, misses: dict[str, int], reference: str | None = None):
    """A scored record whose only errors are missed reference findings, `misses[tier]` per tier."""
    gt = [f(f"gt_{tier}_{i}", sig=tier) for tier, n in misses.items() for i in range(n)]
    if not gt:
        gt = [f("gt_ok", status="normal", sig="routine")]
        rec = record(pair_id, gt, [f("p_ok", status="normal", sig="routine")],
                     matching([__import__("builders").row("p_ok", "gt_ok")]))
    else:
        rec = record(pair_id, gt, [], matching([], [], [g.id for g in gt]))
    rec.study_id = study
    rec.reference = reference or f"reference of {pair_id}"
    return score_record(rec)


def failed(pair_id: str, study=None):
    rec = scored(pair_id, study, {})
    return rec.model_copy(update={"error": "extract: judge timed out", "scores": None})


def row_of(result: dict, tier: str) -> dict:
    return next(r for r in result["rows"] if r["tier"] == tier)


# --------------------------------------------------------------------------- statistics


def test_tier_errors_counts_error_units_per_tier():
    rec = scored("p", "s", {"critical": 1, "urgent": 2, "routine": 1})
    assert tier_errors(rec) == {"critical": 1, "urgent": 2, "notable": 0, "routine": 1, "actionable": 3}


def test_b_always_worse_gives_a_small_p_and_an_interval_above_zero():
    a = [scored(f"p{i}", f"s{i // 2}", {}) for i in range(40)]  # 20 studies of 2 pairs
    b = [scored(f"p{i}", f"s{i // 2}", {"urgent": 1 + i % 2}) for i in range(40)]
    result = compare_records(a, b)
    total = row_of(result, "actionable")
    assert total["mean_difference"] == pytest.approx(1.5)
    assert 0 < total["ci"][0] <= 1.5 <= total["ci"][1]
    assert total["p_value"] < 0.001 and total["b_worse"] == 40 and total["b_better"] == 0
    assert result["n_compared"] == 40 and result["n_studies"] == 20
    assert result["permutation"]["method"] == "monte carlo"  # 2**20 sign vectors: drawn
    assert total["p_value"] == pytest.approx(1 / (result["permutation"]["n_permutations"] + 1))
    urgent, critical = row_of(result, "urgent"), row_of(result, "critical")
    assert urgent["mean_difference"] == pytest.approx(1.5) and urgent["p_value"] < 0.001
    assert critical["mean_difference"] == 0 and critical["ci"] == [0, 0] and critical["p_value"] == 1
    # swapping the runs flips the sign, keeps p
    swapped = row_of(compare_records(b, a), "actionable")
    assert swapped["mean_difference"] == pytest.approx(-1.5)
    assert swapped["ci"] == pytest.approx([-total["ci"][1], -total["ci"][0]])
    assert swapped["p_value"] == total["p_value"]


def test_identical_runs_give_zero_difference_and_p_one():
    runs = [scored(f"p{i}", f"s{i % 7}", {"critical": i % 2, "notable": i % 3}) for i in range(30)]
    result = compare_records(runs, runs)
    for row in result["rows"]:
        assert row["mean_difference"] == 0 and row["ci"] == [0, 0] and row["p_value"] == 1
        assert row["same"] == 30 and row["mean_a"] == row["mean_b"]


def test_exact_permutation_p_with_few_studies():
    # three studies, B worse by one error in each: of the 8 sign vectors, all-plus and
    # all-minus reach the observed |mean|: p = 2/8
    a = [scored(f"p{i}", f"s{i}", {}) for i in range(3)]
    b = [scored(f"p{i}", f"s{i}", {"notable": 1}) for i in range(3)]
    result = compare_records(a, b)
    assert result["permutation"] == {"test": "paired sign flips by study, two-sided",
                                     "method": "exact", "n_permutations": 8, "seed": 0}
    assert row_of(result, "actionable")["p_value"] == 0.25


def test_sign_flips_keep_a_studys_pairs_together():
    # one study holds every pair: a single sign to flip, so p is 1 however large the effect
    diffs = np.array([1.0, 2.0, 3.0, 1.0])
    p, method = sign_flip_p_values(diffs, group_by_study(["s"] * 4))
    assert method == "exact" and p.tolist() == [1.0]
    p, _ = sign_flip_p_values(diffs, group_by_study(["a", "b", "c", "d"]))
    assert p.tolist() == [2 / 16]


def test_interval_is_resamplings_mean_interval_over_studies_seeded():
    # ids in sorted order: compare takes the pairs by pair_id (item 12 of issue 36)
    a = [scored(f"p{i:02d}", f"s{i // 3}" if i % 4 else None, {"urgent": i % 2}) for i in range(24)]
    b = [scored(f"p{i:02d}", f"s{i // 3}" if i % 4 else None, {"urgent": (i * 7) % 3}) for i in range(24)]
    result = compare_records(a, b)
    diffs = [tier_errors(rb)["actionable"] - tier_errors(ra)["actionable"] for ra, rb in zip(a, b)]
    studies = [r.study_id or ("own", r.pair_id) for r in a]  # no study id: its own study
    total = row_of(result, "actionable")
    assert total["ci"] == pytest.approx(list(mean_interval(diffs, studies)))
    assert total["mean_difference"] == pytest.approx(np.mean(diffs))
    assert result["n_studies"] == len(set(studies))
    assert compare_records(a, b) == result  # seeded: the same records, the same numbers
    assert compare_records(a, b, seed=1)["rows"] != result["rows"]


def test_the_result_does_not_depend_on_the_order_of_records():
    """Issue 36, item 12: the same records in other orders (of A, of B, of both) give the
    same interval and p-value, for the exact and the Monte Carlo permutation test."""
    import random

    for n_studies in (6, 20):  # 2**6 sign vectors: exact; 2**20: monte carlo
        a = [scored(f"p{i:02d}", f"s{i % n_studies}" if i % 5 else None, {"urgent": i % 3})
             for i in range(2 * n_studies)]
        b = [scored(f"p{i:02d}", f"s{i % n_studies}" if i % 5 else None, {"urgent": (i * 7) % 4, "critical": i % 2})
             for i in range(2 * n_studies)]
        result = compare_records(a, b, n_resamples=500, n_permutations=2000)
        shuffle = random.Random(3)
        for _ in range(5):
            a2, b2 = a[:], b[:]
            shuffle.shuffle(a2)
            shuffle.shuffle(b2)
            assert compare_records(a2, b2, n_resamples=500, n_permutations=2000) == result


def test_pairs_not_scored_by_both_are_dropped_with_their_reason():
    a = [scored("both", "s1", {"urgent": 1}), scored("only-a", "s2", {}), failed("fail-a"),
         scored("fail-b", "s3", {}), failed("fail-both"), scored("ref", "s4", {}, reference="one")]
    b = [scored("both", "s1", {}), scored("only-b", "s5", {}), scored("fail-a", None, {}),
         failed("fail-b"), failed("fail-both"), scored("ref", "s4", {}, reference="other")]
    result = compare_records(a, b)
    assert result["n_compared"] == 1 and result["n_dropped"] == 6
    assert result["dropped"] == {"only_in_a": 1, "only_in_b": 1, "failed_in_a": 1, "failed_in_b": 1,
                                 "failed_in_both": 1, "different_reference": 1}
    text = format_comparison(result)
    assert ("dropped 6 pair(s): 1 only in A, 1 only in B, 1 failed in A, 1 failed in B, "
            "1 failed in both, 1 reference text differs") in text
    # a later record of a pair replaces the earlier one, as in the summary
    again = compare_records(a + [scored("fail-a", None, {})], b)
    assert again["n_compared"] == 2 and again["dropped"]["failed_in_a"] == 0


def adjudicated_runs():
    """20 pairs with one urgent miss in both runs (no actionable difference). A's
    adjudication gives each 1 significant error; B's gives the even pairs 0, and B's last
    four pairs are not adjudicated (two stale, two scored without the stage)."""
    a = [adjudicated(scored(f"p{i}", f"s{i // 2}", {"urgent": 1}), errors=[1]) for i in range(20)]
    b = [adjudicated(scored(f"p{i}", f"s{i // 2}", {"urgent": 1}), errors=[i % 2]) for i in range(16)]
    b += [adjudicated(scored(f"p{i}", f"s{i // 2}", {"urgent": 1}), state="stale") for i in (16, 17)]
    b += [scored(f"p{i}", f"s{i // 2}", {"urgent": 1}) for i in (18, 19)]
    return a, b


def test_significant_difference_is_over_the_pairs_adjudicated_in_both_runs():
    a, b = adjudicated_runs()
    result = compare_records(a, b)
    assert row_of(result, "actionable")["mean_difference"] == 0
    sig = result["significant"]
    assert sig["n_compared"] == 16 and sig["n_not_adjudicated"] == 4 and sig["n_studies"] == 8
    diffs = [i % 2 - 1 for i in range(16)]
    assert sig["mean_a"] == 1 and sig["mean_b"] == 0.5 and sig["mean_difference"] == -0.5
    assert sig["ci"] == pytest.approx(list(mean_interval(diffs, [f"s{i // 2}" for i in range(16)])))
    assert sig["b_better"] == 8 and sig["same"] == 8 and sig["b_worse"] == 0
    # 8 studies, each B better by one: of 256 sign vectors, all-plus and all-minus reach it
    assert sig["permutation_method"] == "exact" and sig["p_value"] == 2 / 256
    assert compare_records(b, a)["significant"]["mean_difference"] == 0.5


def test_significant_difference_without_adjudication_is_not_available():
    runs = [scored(f"p{i}", f"s{i}", {"urgent": 1}) for i in range(4)]
    sig = compare_records(runs, runs)["significant"]
    assert sig["n_compared"] == 0 and sig["n_not_adjudicated"] == 4
    assert sig["mean_difference"] is None and sig["ci"] is None and sig["p_value"] is None
    assert format_comparison(compare_records(runs, runs)).splitlines()[3] == (
        "significant errors (error adjudication): n/a, no compared pair's adjudication stands in both runs")


# --------------------------------------------------------------------------- command


def write(path, records):
    with RecordWriter(path) as writer:
        for rec in records:
            writer.write(rec)
    return path


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "radmatch_audit.cli", "compare", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_compare_command_text_and_json(tmp_path):
    a = write(tmp_path / "a.jsonl", [scored(f"p{i}", f"s{i}", {}) for i in range(12)] + [failed("x")])
    b = write(tmp_path / "b.jsonl", [scored(f"p{i}", f"s{i}", {"critical": 1}) for i in range(12)])
    proc = run_cli(a, b)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"A = {a}" in out and "12 pair(s) scored by both, in 12 studies" in out
    assert "dropped 1 pair(s): 1 only in A" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert lines["critical"][1:4] == ["0.000", "1.000", "+1.000"]
    assert lines["actionable"][3] == "+1.000" and "<0.001" in lines["actionable"]
    data = json.loads(run_cli(a, b, "--json", "--resamples", "500").stdout)
    total = row_of(data, "actionable")
    assert total["mean_difference"] == 1 and total["ci"] == [1, 1] and total["p_value"] < 0.001
    assert data["bootstrap"]["n_resamples"] == 500 and data["label_b"] == str(b)
    assert data["judges"] == {"A": [], "B": []}


def test_compare_command_refuses_what_it_cannot_compare(tmp_path):
    a = write(tmp_path / "a.jsonl", [scored("p1", "s1", {})])
    proc = run_cli(a, tmp_path / "missing.jsonl")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("radmatch-audit: error: cannot read") and "missing.jsonl" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"reference": "r", "candidate": "c"}) + "\n")
    proc = run_cli(a, pairs)
    assert proc.returncode == 2 and "is not a records file" in proc.stderr

    junk = tmp_path / "junk.jsonl"
    junk.write_text("hello\nworld\n")
    proc = run_cli(junk, a)
    assert proc.returncode == 2 and "is not a records file" in proc.stderr

    other = write(tmp_path / "other.jsonl", [scored("q1", "s1", {})])
    proc = run_cli(a, other)
    assert proc.returncode == 2 and "no pair_id in common" in proc.stderr

    broken = write(tmp_path / "broken.jsonl", [failed("p1")])
    proc = run_cli(a, broken)
    assert proc.returncode == 2 and "no pair was scored by both" in proc.stderr
    assert "1 failed in B" in proc.stderr

    with_bad = write(tmp_path / "bad.jsonl", [scored("p1", "s1", {"urgent": 1})])
    with open(with_bad, "a", encoding="utf-8") as fh:
        fh.write("{not json\n")
    proc = run_cli(a, with_bad)
    assert proc.returncode == 1 and "1 line(s) of" in proc.stderr  # the rest compared
    assert "1 pair(s) scored by both" in proc.stdout


def test_compare_is_registered_with_help():
    proc = subprocess.run([sys.executable, "-m", "radmatch_audit.cli", "compare", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "95% paired bootstrap" in " ".join(proc.stdout.split())


def test_compare_command_shows_the_significant_difference_first(tmp_path):
    a_recs, b_recs = adjudicated_runs()
    a = write(tmp_path / "a.jsonl", a_recs)
    b = tmp_path / "b.jsonl"  # B's unadjudicated pairs as a version-3 file wrote them
    b.write_text("".join((version3_line(r) if r.pair_id in ("p18", "p19") else r.to_json()) + "\n"
                         for r in b_recs), encoding="utf-8")
    proc = run_cli(a, b)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    start = out.index("significant errors (error adjudication), B minus A per pair, over 16 "
                      "pair(s) adjudicated in both runs (4 not):")
    assert out[start + 2].split()[:4] == ["significant", "1.000", "0.500", "-0.500"]
    assert out[start + 4] == "actionable errors (the paper's RadMatch count):"
    assert start < next(i for i, line in enumerate(out) if line.startswith("actionable "))
    data = json.loads(run_cli(a, b, "--json").stdout)
    assert data["significant"]["mean_difference"] == -0.5 and data["significant"]["n_compared"] == 16


def test_compare_warns_below_ten_studies_and_names_the_p_it_cannot_go_below(tmp_path):
    a = write(tmp_path / "a.jsonl", [scored(f"p{i}", f"s{i}", {}) for i in range(2)])
    b = write(tmp_path / "b.jsonl", [scored(f"p{i}", f"s{i}", {"critical": 1}) for i in range(2)])
    proc = run_cli(a, b)
    assert proc.returncode == 0, proc.stderr
    assert "warning: 2 studies, fewer than 10: the interval is not a reliable 95% interval; an " \
           "exact p over 2 studies cannot be below 0.5" in proc.stdout.splitlines()
    assert row_of(json.loads(run_cli(a, b, "--json").stdout), "actionable")["p_value"] == 0.5
    assert json.loads(run_cli(a, b, "--json").stdout)["warnings"][0].startswith("2 studies, fewer than 10")
    a10 = write(tmp_path / "a10.jsonl", [scored(f"p{i}", f"s{i}", {}) for i in range(10)])
    b10 = write(tmp_path / "b10.jsonl", [scored(f"p{i}", f"s{i}", {"critical": 1}) for i in range(10)])
    assert "warning" not in run_cli(a10, b10).stdout
    assert json.loads(run_cli(a10, b10, "--json").stdout)["warnings"] == []


def test_compare_says_the_embedded_judges_scores_are_not_clinical(tmp_path):
    def by(judge_model, misses):
        runs = [scored(f"p{i}", f"s{i}", misses) for i in range(12)]
        for rec in runs:
            rec.judge.backend, rec.judge.model = "transformers", judge_model
        return runs

    a = write(tmp_path / "a.jsonl", by("radmatch-judge", {}))
    b = write(tmp_path / "b.jsonl", by("SmolLM2-135M-Instruct", {"urgent": 1}))
    warnings = [line for line in run_cli(a, b).stdout.splitlines() if line.startswith("warning: ")]
    assert warnings == [("warning: the scores of B come from the embedded small judge "
                         "(SmolLM2-135M-Instruct), which only exercises the pipeline: they are not "
                         "clinical, and neither is their difference")]
    assert not any(line.startswith("warning: ") for line in run_cli(a, a).stdout.splitlines())


def enumerated_sign_flip_p(differences: np.ndarray, clusters) -> np.ndarray:
    """The exact p that compare computed itself before it used scipy: every sign vector of
    the studies' summed differences, counted where |mean| reaches the observed one."""
    diffs = np.atleast_2d(np.asarray(differences, dtype=float).T).T
    n, k = diffs.shape[0], len(clusters)
    sums = np.stack([diffs[list(c)].sum(axis=0) for c in clusters])
    observed = np.abs(sums.sum(axis=0)) / n
    codes = np.arange(2**k, dtype=np.int64)[:, None]
    signs = 1 - 2 * ((codes >> np.arange(k)) & 1)
    stats = np.abs(signs @ sums) / n
    return (stats >= observed - 1e-9 * np.maximum(1.0, observed)).mean(axis=0)


@pytest.mark.parametrize("n_pairs, n_studies", [(4, 1), (5, 2), (9, 3), (12, 6), (20, 10)])
def test_scipys_exact_sign_flip_p_equals_the_enumeration(n_pairs, n_studies):
    rng = np.random.default_rng(n_pairs)
    diffs = rng.integers(-3, 4, size=(n_pairs, 3)).astype(float)  # three columns, as tiers
    diffs[:, 2] = 0  # no difference at all: p is 1
    studies = [f"s{i % n_studies}" for i in range(n_pairs)]
    clusters = group_by_study(studies)
    p, method = sign_flip_p_values(diffs, clusters)
    assert method == "exact"
    assert p.tolist() == enumerated_sign_flip_p(diffs, clusters).tolist()


def test_compare_counts_an_unaddressed_negative_in_no_actionable_tier():
    from radmatch_audit.read.compare import TOTAL, tier_errors

    counts = tier_errors(score_record(spu_record(("normal", "urgent"), ("abnormal", "notable"),
                                                 ("normal", "routine"))))
    assert (counts["urgent"], counts["notable"], counts["routine"], counts[TOTAL]) == (0, 1, 1, 1)
