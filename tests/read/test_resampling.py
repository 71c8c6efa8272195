"""The shared intervals: clusters stay together, seeds reproduce, Wilson matches its formula."""

import math

import numpy as np
import pytest
from scipy import stats

from radmatch_audit.read.resampling import (
    group_by_study, mean_interval, percentile_interval, resample_studies, wilson_interval,
)


def test_a_resample_draws_whole_studies():
    study_ids = ["a", "a", "a", "b", "c", "c"]
    clusters = group_by_study(study_ids)
    for idx in resample_studies(clusters, n_resamples=50, seed=3):
        counts = {}
        for i in idx:
            counts[study_ids[i]] = counts.get(study_ids[i], 0) + 1
        sizes = {"a": 3, "b": 1, "c": 2}
        assert all(n % sizes[s] == 0 for s, n in counts.items()), counts
        assert len({study_ids[i] for i in idx}) <= 3


def test_the_interval_is_seeded_and_covers_the_mean():
    rng = np.random.default_rng(1)
    values = rng.poisson(2.0, size=120).astype(float)
    study_ids = [i // 4 for i in range(120)]
    first = mean_interval(values, study_ids)
    assert first == mean_interval(values, study_ids)
    assert first != mean_interval(values, study_ids, seed=7)
    assert first[0] < values.mean() < first[1]


def test_clustering_widens_the_interval_when_studies_share_their_values():
    # four identical candidates per study: 30 independent values, not 120
    base = np.random.default_rng(2).normal(size=30)
    values = np.repeat(base, 4)
    study_ids = np.repeat(np.arange(30), 4)
    clustered = mean_interval(values, study_ids)
    naive = mean_interval(values, np.arange(120))
    assert (clustered[1] - clustered[0]) > 1.5 * (naive[1] - naive[0])


def test_degenerate_inputs_give_nan_not_an_error():
    assert all(math.isnan(x) for x in mean_interval([], []))
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="3 values but 2 study ids"):
        mean_interval([1, 2, 3], ["a", "b"])


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (57, 200)])
def test_wilson_matches_scipy(k, n):
    expected = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((expected.low, expected.high), abs=1e-9)


def test_the_fast_mean_interval_draws_what_the_generic_bootstrap_draws():
    rng = np.random.default_rng(5)
    values = rng.poisson(1.5, size=90).astype(float)
    study_ids = rng.integers(0, 40, size=90)
    clusters = group_by_study(study_ids)
    draws = np.array([values[idx].mean() for idx in resample_studies(clusters, 300, seed=4)])
    generic = percentile_interval(draws)
    fast = mean_interval(values, study_ids, n_resamples=300, seed=4)
    assert fast == pytest.approx(generic, abs=1e-12)

