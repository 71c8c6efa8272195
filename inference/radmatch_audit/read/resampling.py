"""Intervals shared by the summary, the metric, `compare` and `agreement`.

Pairs are not independent: a study's candidates share one reference, so every
bootstrap here resamples whole studies (clusters), with a seeded generator so that
the same records always give the same interval.

>>> clusters = group_by_study(["s1", "s1", "s2", "s3"])
>>> clusters
[[0, 1], [2], [3]]
>>> low, high = mean_interval([1.0, 1.0, 0.0, 2.0], ["s1", "s1", "s2", "s3"], n_resamples=200)
>>> 0 <= low <= high <= 2
True
>>> [round(x, 3) for x in wilson_interval(8, 10)]
[0.49, 0.943]
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Hashable, Optional, Sequence

import numpy as np

N_RESAMPLES = 2000
# Below this many studies (the bootstrap's unit) an interval is flagged (agreement, compare):
# a percentile bootstrap over k studies has few distinct resamples (35 for k = 4) and tau-b
# few distinct values, so the
# interval covers far less than 95 % (docs/agreement.md, section 4).
MIN_STUDIES = 10
SEED = 0


def group_by_study(study_ids: Sequence[Hashable]) -> list[list[int]]:
    """Indices of the items of each study, studies in order of first appearance."""
    clusters: dict[Hashable, list[int]] = {}
    for i, study in enumerate(study_ids):
        clusters.setdefault(study, []).append(i)
    return list(clusters.values())


def resample_studies(
    clusters: Sequence[Sequence[int]], n_resamples: int = N_RESAMPLES, seed: int = SEED
):
    """Yield `n_resamples` index arrays, each drawing len(clusters) whole studies with replacement."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(c, dtype=np.intp) for c in clusters]
    for _ in range(n_resamples):
        picks = rng.integers(0, len(arrays), size=len(arrays))
        yield np.concatenate([arrays[k] for k in picks])


def percentile_interval(draws: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile interval of the non-nan draws ((nan, nan) when there is none)."""
    draws = draws[~np.isnan(draws)]
    if draws.size == 0:
        return (math.nan, math.nan)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return (float(low), float(high))


def mean_interval(
    values: Sequence[float], study_ids: Sequence[Hashable], confidence: float = 0.95,
    n_resamples: int = N_RESAMPLES, seed: int = SEED,
) -> tuple[float, float]:
    """Interval of the mean of `values`, resampling studies (a study's pairs stay together).

    The draws of `resample_studies` with the mean as statistic, computed from each
    study's sum and count in blocks of draws: 20,000 pairs take milliseconds, not seconds.
    """
    if len(values) != len(study_ids):
        raise ValueError(f"{len(values)} values but {len(study_ids)} study ids")
    clusters = group_by_study(study_ids)
    if not clusters:
        return (math.nan, math.nan)
    array = np.asarray(values, dtype=float)
    sums = np.array([array[c].sum() for c in clusters])
    counts = np.array([len(c) for c in clusters], dtype=float)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    # draws per block: 250,000 picks (three 2 MB arrays) whatever the corpus; blocks of
    # 2,000,000 made the summary the peak of a long run (48 MB at 1,250 studies)
    block = max(1, 250_000 // len(clusters))
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        picks = np.stack([rng.integers(0, len(clusters), size=len(clusters))
                          for _ in range(start, stop)])
        means[start:stop] = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    return percentile_interval(means, confidence)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Optional[list[float]]:
    """Wilson score interval of a proportion as [low, high] (a list, for JSON); None when n is 0."""
    if n == 0:
        return None
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]
