"""Is system B better than system A? The statistics of `radmatch-audit compare A.jsonl B.jsonl`.

Over the pairs both runs scored (matched by pair_id), the mean difference in
actionable errors per pair, B minus A (negative: B makes fewer errors), per
significance tier and in total, with

- a 95 % paired bootstrap interval that resamples studies (a study's candidates
  share one reference, so its pairs move together; a pair without a study id is its
  own study), from `radmatch_audit.read.resampling`, seeded;
- a two-sided paired permutation p-value: under "A and B are exchangeable", the
  sign of each study's summed difference is flipped at random (every sign vector
  when there are few studies, an exact p; else `n_permutations` seeded draws, with
  the observed one counted, so p is never 0).

Pairs that only one run holds, that failed in either run, or whose reference text
differs between the runs are dropped and counted, each with its reason.

`significant` holds the same statistics for the error adjudication's count
(`significant_errors`, docs/scoring.md section 5) over the compared pairs whose
adjudication stands in both runs; the others are counted apart.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Sequence

import numpy as np
from scipy.stats import permutation_test

from radmatch_audit.read.reading import last_by_pair
from radmatch_audit.core.records import Record
from radmatch_audit.read.resampling import N_RESAMPLES, SEED, group_by_study, resample_studies
from radmatch_audit.scoring.results import ACTIONABLE_TIERS, ERROR_OUTCOMES, SIGNIFICANCE_TIERS

N_PERMUTATIONS = 10_000
CONFIDENCE = 0.95
TOTAL = "actionable"  # the row of all actionable errors (the headline count)
DROP_REASONS = {
    "only_in_a": "only in A",
    "only_in_b": "only in B",
    "failed_in_a": "failed in A",
    "failed_in_b": "failed in B",
    "failed_in_both": "failed in both",
    "different_reference": "reference text differs",
}


# --------------------------------------------------------------------------- per pair


def tier_errors(record: Record) -> dict[str, int]:
    """Error units (INC, MIS, SPU) of a scored record per significance tier, and the
    actionable total (errors at an actionable tier: the record's actionable_errors).

    At an actionable tier only units counted as actionable: an SPU of normal findings
    is not (docs/scoring.md section 5), so the actionable tiers add up to the total.
    """
    counts = dict.fromkeys(SIGNIFICANCE_TIERS, 0)
    for unit in record.scores.units:
        if unit.outcome in ERROR_OUTCOMES and unit.tier in counts and (
            unit.actionable or unit.tier not in ACTIONABLE_TIERS
        ):
            counts[unit.tier] += 1
    counts[TOTAL] = record.scores.actionable_errors
    return counts


def _scored(record: Record) -> bool:
    return record.error is None and record.scores is not None


def paired(records_a: Iterable[Record], records_b: Iterable[Record]):
    """(pairs both runs scored as (a, b) sorted by pair_id, dropped counts by reason).

    Sorted, so that the resampling and the sign flips, which draw studies by position,
    give one result for one set of records whatever the order of their lines."""
    a, b = last_by_pair(records_a), last_by_pair(records_b)  # the last record of a pair counts
    dropped = dict.fromkeys(DROP_REASONS, 0)
    dropped["only_in_a"] = sum(1 for pid in a if pid not in b)
    dropped["only_in_b"] = sum(1 for pid in b if pid not in a)
    both = []
    for pid, rec_a in a.items():
        rec_b = b.get(pid)
        if rec_b is None:
            continue
        ok_a, ok_b = _scored(rec_a), _scored(rec_b)
        if not ok_a and not ok_b:
            dropped["failed_in_both"] += 1
        elif not ok_a:
            dropped["failed_in_a"] += 1
        elif not ok_b:
            dropped["failed_in_b"] += 1
        elif rec_a.reference != rec_b.reference:
            dropped["different_reference"] += 1
        else:
            both.append((rec_a, rec_b))
    both.sort(key=lambda pair: pair[0].pair_id)
    return both, dropped


# --------------------------------------------------------------------------- statistics


def sign_flip_p_values(
    differences: np.ndarray,
    clusters: Sequence[Sequence[int]],
    n_permutations: int = N_PERMUTATIONS,
    seed: int = SEED,
) -> tuple[np.ndarray, str]:
    """Two-sided p-value of the mean of each column of `differences` (pairs x columns)
    under random sign flips of whole studies; and "exact" or "monte carlo".

    scipy's `permutation_test` on the studies' summed differences: every sign vector
    when 2**studies <= n_permutations (an exact p); otherwise `n_permutations` seeded
    draws plus the observed assignment.
    """
    diffs = np.atleast_2d(np.asarray(differences, dtype=float).T).T
    n, k = diffs.shape[0], len(clusters)
    if n == 0 or k == 0:
        return np.full(diffs.shape[1], math.nan), "exact"
    if k == 1:  # its two sign vectors tie (scipy wants two samples or more)
        return np.ones(diffs.shape[1]), "exact"
    sums = np.stack([diffs[list(c)].sum(axis=0) for c in clusters])  # studies x columns

    def absolute_mean(study_sums: np.ndarray, axis: int) -> np.ndarray:
        return np.abs(study_sums.sum(axis=axis)) / n

    # one sample, permuted by "samples": each study's sum keeps or flips its sign; scipy
    # enumerates every sign vector when there are at most n_permutations of them
    result = permutation_test(
        (sums,), absolute_mean, permutation_type="samples", vectorized=True, axis=0,
        n_resamples=n_permutations, alternative="greater", batch=1024,
        rng=np.random.default_rng(seed),
    )
    return np.atleast_1d(result.pvalue), "exact" if 2**k <= n_permutations else "monte carlo"


def bootstrap_intervals(
    differences: np.ndarray,
    clusters: Sequence[Sequence[int]],
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> np.ndarray:
    """Percentile interval of the mean of each column, resampling studies: one pass of
    `resampling.resample_studies` for all columns, so each column's interval is the
    one `resampling.mean_interval` gives it."""
    diffs = np.atleast_2d(np.asarray(differences, dtype=float).T).T
    if not clusters:
        return np.full((diffs.shape[1], 2), math.nan)
    draws = np.array([diffs[idx].mean(axis=0) for idx in resample_studies(clusters, n_resamples, seed)])
    alpha = (1 - confidence) / 2
    return np.quantile(draws, [alpha, 1 - alpha], axis=0).T


def compare_records(
    records_a: Iterable[Record],
    records_b: Iterable[Record],
    *,
    n_resamples: int = N_RESAMPLES,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """The comparison as JSON-ready data (what `radmatch-audit compare --json` prints).

    `rows` holds one entry per significance tier and one for all actionable errors
    (`tier` "actionable"): means of A and B, the mean difference B - A with its
    interval and p-value, and how many pairs B does better, worse or the same on.
    """
    both, dropped = paired(records_a, records_b)
    columns = [*SIGNIFICANCE_TIERS, TOTAL]
    a = np.array([[tier_errors(ra)[c] for c in columns] for ra, _ in both], dtype=float).reshape(-1, len(columns))
    b = np.array([[tier_errors(rb)[c] for c in columns] for _, rb in both], dtype=float).reshape(-1, len(columns))
    diff = b - a
    clusters = study_clusters(both)
    intervals = bootstrap_intervals(diff, clusters, confidence, n_resamples, seed)
    p_values, method = sign_flip_p_values(diff, clusters, n_permutations, seed)
    rows = [
        {"tier": column, "actionable": column == TOTAL or column in ACTIONABLE_TIERS,
         **difference_stats(a[:, j], b[:, j], intervals[j], p_values[j])}
        for j, column in enumerate(columns)
    ]
    n = len(both)
    return {
        "difference": "B minus A, actionable errors per pair (negative: B makes fewer errors)",
        "n_compared": n,
        "n_studies": len(clusters),
        "n_dropped": sum(dropped.values()),
        "dropped": dropped,
        "rows": rows,
        "significant": significant_difference(both, n_resamples, n_permutations, seed, confidence),
        "confidence": confidence,
        "bootstrap": {"unit": "study", "n_resamples": n_resamples, "seed": seed},
        "permutation": {
            "test": "paired sign flips by study, two-sided",
            "method": method,
            "n_permutations": 2 ** len(clusters) if method == "exact" else n_permutations,
            "seed": seed,
        },
    }


def significant_difference(
    both: list[tuple[Record, Record]], n_resamples: int, n_permutations: int, seed: int,
    confidence: float,
) -> dict[str, Any]:
    """B minus A in significant errors per pair, over the pairs whose adjudication stands
    in both runs: means, interval, p-value, and how many compared pairs were left out."""
    stand = [(ra, rb) for ra, rb in both
             if ra.scores.adjudication == "current" and rb.scores.adjudication == "current"]
    a = np.array([ra.scores.significant_errors for ra, _ in stand], dtype=float)
    b = np.array([rb.scores.significant_errors for _, rb in stand], dtype=float)
    d = b - a
    clusters = study_clusters(stand)
    n = len(stand)
    interval = bootstrap_intervals(d, clusters, confidence, n_resamples, seed)[0]
    p_values, method = sign_flip_p_values(d, clusters, n_permutations, seed)
    stats = difference_stats(a, b, interval, p_values[0])
    return {
        "difference": "B minus A, significant errors per pair (the error adjudication's count)",
        "n_compared": n,
        "n_studies": len(clusters),
        "n_not_adjudicated": len(both) - n,  # compared pairs whose adjudication does not stand in both
        **{key: stats[key] for key in ("mean_a", "mean_b", "mean_difference", "ci", "p_value")},
        "permutation_method": method,
        **{key: stats[key] for key in ("b_better", "b_worse", "same")},
    }


def study_clusters(both: list[tuple[Record, Record]]) -> list[list[int]]:
    """The pairs grouped by study (a pair without a study id is its own), for resampling."""
    return group_by_study([
        ("study", ra.study_id or rb.study_id) if (ra.study_id or rb.study_id) else ("pair", ra.pair_id)
        for ra, rb in both
    ])


def difference_stats(a: np.ndarray, b: np.ndarray, interval: Any, p_value: Any) -> dict[str, Any]:
    """One row of a comparison: means of A and B, B - A with its interval and p-value, and
    on how many pairs B does better, worse or the same (means None over no pair)."""
    d, n = b - a, len(a)
    return {
        "mean_a": _num(a.mean()) if n else None,
        "mean_b": _num(b.mean()) if n else None,
        "mean_difference": _num(d.mean()) if n else None,
        "ci": [_num(x) for x in interval] if n else None,
        "p_value": _num(p_value) if n else None,
        "b_better": int((d < 0).sum()),
        "b_worse": int((d > 0).sum()),
        "same": int((d == 0).sum()),
    }


def _num(x: Any) -> Optional[float]:
    x = float(x)
    return None if math.isnan(x) else x


# --------------------------------------------------------------------------- text


def _signed(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def _plain(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _p(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def dropped_line(dropped: dict[str, int]) -> str:
    parts = [f"{count} {DROP_REASONS[reason]}" for reason, count in dropped.items() if count]
    total = sum(dropped.values())
    return f"dropped {total} pair(s): " + ", ".join(parts) if total else "dropped no pair"


def format_comparison(result: dict[str, Any]) -> str:
    label_a, label_b = result.get("label_a", "A"), result.get("label_b", "B")
    pct = round(100 * result["confidence"])
    lines = [
        f"A = {label_a}",
        f"B = {label_b}",
        *(f"judge{'s' if len(j) > 1 else ''} of {side}: {', '.join(j)}"
          for side, j in (result.get("judges") or {}).items() if j),
        f"{result['n_compared']} pair(s) scored by both, in {result['n_studies']} "
        f"{'study' if result['n_studies'] == 1 else 'studies'}; " + dropped_line(result["dropped"]),
        *_significant_lines(result.get("significant"), pct),
        "difference: B minus A, actionable errors per pair (negative: B makes fewer errors)",
        "",
        f"{'tier':<12}{'mean A':>8}{'mean B':>8}{'B - A':>9}  {f'{pct}% CI':<19}{'p':>7}"
        f"{'B better':>10}{'B worse':>9}{'same':>6}",
    ]
    for row in result["rows"]:
        ci = row["ci"]
        interval = "n/a" if ci is None or None in ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
        name = row["tier"] if row["actionable"] else row["tier"] + "*"
        lines.append(
            f"{name:<12}{_plain(row['mean_a']):>8}{_plain(row['mean_b']):>8}"
            f"{_signed(row['mean_difference']):>9}  {interval:<19}{_p(row['p_value']):>7}"
            f"{row['b_better']:>10}{row['b_worse']:>9}{row['same']:>6}"
        )
    boot, perm = result["bootstrap"], result["permutation"]
    lines += [
        "",
        f"{TOTAL}: all actionable errors ({'/'.join(ACTIONABLE_TIERS)}); * routine errors "
        "are counted but are not actionable",
        f"CI: paired bootstrap over studies, {boot['n_resamples']} resamples, seed {boot['seed']}; "
        f"p: {perm['test']}, {perm['method']} ({perm['n_permutations']} sign vectors"
        + ("" if perm["method"] == "exact" else f", seed {perm['seed']}") + ")",
    ]
    return "\n".join(lines)


NO_SIGNIFICANT = ("significant errors (error adjudication): n/a, no compared pair's "
                  "adjudication stands in both runs")


def _significant_lines(sig: Optional[dict[str, Any]], pct: int) -> list[str]:
    """The significant errors' difference, the headline where both runs were adjudicated."""
    if sig is None:
        return []
    if not sig["n_compared"]:
        return [NO_SIGNIFICANT, ""]
    ci = sig["ci"]
    interval = "n/a" if ci is None or None in ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
    left_out = f" ({sig['n_not_adjudicated']} not)" if sig["n_not_adjudicated"] else ""
    head = (f"significant errors (error adjudication), B minus A per pair, over "
            f"{sig['n_compared']} pair(s) adjudicated in both runs{left_out}:")
    columns = (f"{'':<12}{'mean A':>8}{'mean B':>8}{'B - A':>9}  {f'{pct}% CI':<19}{'p':>7}"
               f"{'B better':>10}{'B worse':>9}{'same':>6}")
    row = (f"{'significant':<12}{_plain(sig['mean_a']):>8}{_plain(sig['mean_b']):>8}"
           f"{_signed(sig['mean_difference']):>9}  {interval:<19}{_p(sig['p_value']):>7}"
           f"{sig['b_better']:>10}{sig['b_worse']:>9}{sig['same']:>6}")
    return [
        head,
        columns,
        row,
        "",
        "actionable errors (the paper's RadMatch count):",
    ]
