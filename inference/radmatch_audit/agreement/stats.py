"""Agreement statistics between a metric and radiologists: Kendall's tau-b, blocked
tau-b within studies, Pearson r, each with a study-clustered bootstrap interval.

Orientation: both sides are error counts (more = worse). Every statistic here is
computed on (metric errors, radiologist errors), which equals the paper's
"metric negated so that higher is better" correlated with negated radiologist counts:
a positive value means the metric agrees with the radiologists. The paper's
per-endpoint table (more negative is better) is the same value with its sign flipped
(`paper_sign` in the JSON output).

The bootstrap resamples studies (a study's candidates stay together) with
`radmatch_audit.read.resampling.resample_studies`, seeded so that the same input always gives
the same interval. A resample is summarised by how many times it drew each pair (its
multiplicities c), and every statistic of a resample is computed from c at once for
all resamples: tau-b as c'(Sx*Sy)c / sqrt(c'|Sx|c * c'|Sy|c), with Sx, Sy the matrices of
signs of pairwise differences (a pair drawn twice is tied with itself on both sides,
as scipy counts it), Pearson r from c-weighted moments. Both equal scipy's value on
the resampled data (tests/agreement/test_agreement.py checks it).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
from scipy import stats as _stats

from radmatch_audit.read.resampling import (
    N_RESAMPLES,
    SEED,
    group_by_study,
    percentile_interval,
    resample_studies,
)


def _constant(values: np.ndarray) -> bool:
    return values.size == 0 or bool(np.all(values == values[0]))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (scipy), nan when fewer than 2 items or a side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or _constant(x) or _constant(y):
        return math.nan
    return float(_stats.kendalltau(x, y, variant="b").statistic)


def pearson_r(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r (scipy), nan when fewer than 3 items or a side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 3 or _constant(x) or _constant(y):
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(_stats.pearsonr(x, y).statistic)


@dataclass
class Blocks:
    """Per-study tau-b of the studies where it is defined, and their weights."""

    taus: np.ndarray  # one per defined block
    weights: np.ndarray  # candidate pairs in the block: n_k (n_k - 1) / 2
    studies: list[int]  # cluster index of each defined block
    candidates: int  # candidates in the defined blocks

    @property
    def value(self) -> float:
        if self.taus.size == 0:
            return math.nan
        return float(np.sum(self.taus * self.weights) / np.sum(self.weights))


def blocks(x: np.ndarray, y: np.ndarray, clusters: Sequence[Sequence[int]]) -> Blocks:
    """tau-b within each study of 2 or more candidates; a study where either side is
    constant (all its candidates tied) has no tau-b and is left out."""
    taus, weights, studies, candidates = [], [], [], 0
    for k, members in enumerate(clusters):
        if len(members) < 2:
            continue
        idx = np.asarray(members)
        tau = kendall_tau_b(x[idx], y[idx])
        if math.isnan(tau):
            continue
        taus.append(tau)
        weights.append(len(members) * (len(members) - 1) / 2)
        studies.append(k)
        candidates += len(members)
    return Blocks(np.asarray(taus, dtype=float), np.asarray(weights, dtype=float), studies, candidates)


def blocked_tau_b(x: Sequence[float], y: Sequence[float], study_ids: Sequence) -> float:
    """Blocked tau-b: the mean of per-study tau-b, each weighted by its candidate pairs."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return blocks(x, y, group_by_study(study_ids)).value


@dataclass
class Correlation:
    """One statistic, its interval, and what it was computed on."""

    value: float
    ci: tuple[float, float]
    n: int  # items (pairs) used; for blocked: candidates in the defined blocks
    blocks: Optional[int] = None  # blocked tau-b only: studies with a defined tau-b

    def to_dict(self) -> dict:
        data = {
            "value": _num(self.value),
            "ci95": [_num(self.ci[0]), _num(self.ci[1])],
            "paper_sign": _num(-self.value),
            "n": self.n,
        }
        if self.blocks is not None:
            data["blocks"] = self.blocks
        return data


def _num(value: float) -> Optional[float]:
    return None if value is None or math.isnan(value) else round(float(value), 4)


@dataclass
class Agreement:
    """tau-b, blocked tau-b and Pearson r of one metric against one endpoint."""

    tau_b: Correlation
    blocked_tau_b: Correlation
    pearson_r: Correlation
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "tau_b": self.tau_b.to_dict(),
            "blocked_tau_b": self.blocked_tau_b.to_dict(),
            "pearson_r": self.pearson_r.to_dict(),
            **self.extra,
        }


def multiplicities(clusters: Sequence[Sequence[int]], n_items: int, n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples, n_items): how often each item is drawn by each study resample."""
    return np.stack([np.bincount(idx, minlength=n_items)
                     for idx in resample_studies(clusters, n_resamples, seed)]).astype(float)


def tau_b_draws(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """tau-b of each resample (rows of `counts`); nan where a side is all tied."""
    sx = np.sign(x[:, None] - x[None, :])
    sy = np.sign(y[:, None] - y[None, :])
    concordance = np.einsum("bi,ij,bj->b", counts, sx * sy, counts)
    untied_x = np.einsum("bi,ij,bj->b", counts, np.abs(sx), counts)
    untied_y = np.einsum("bi,ij,bj->b", counts, np.abs(sy), counts)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((untied_x > 0) & (untied_y > 0), concordance / np.sqrt(untied_x * untied_y), np.nan)


def pearson_draws(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Pearson r of each resample from count-weighted moments; nan where a side is constant."""
    n = counts.sum(axis=1)
    mx, my = counts @ x / n, counts @ y / n
    vx = counts @ (x * x) / n - mx * mx
    vy = counts @ (y * y) / n - my * my
    cov = counts @ (x * y) / n - mx * my
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (vx > 1e-12 * (1 + mx * mx)) & (vy > 1e-12 * (1 + my * my))
        return np.where(ok, np.clip(cov / np.sqrt(vx * vy), -1, 1), np.nan)


def agreement(
    metric: Sequence[float],
    target: Sequence[float],
    study_ids: Sequence,
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> Agreement:
    """The three statistics with 95 % study-bootstrap intervals.

    `metric` and `target` are error counts of the same pairs; `study_ids` groups them.
    """
    x, y = np.asarray(metric, dtype=float), np.asarray(target, dtype=float)
    if not (x.size == y.size == len(study_ids)):
        raise ValueError(f"{x.size} metric values, {y.size} targets, {len(study_ids)} study ids")
    clusters = group_by_study(study_ids)
    counts = multiplicities(clusters, x.size, n_resamples, seed)
    tau = Correlation(kendall_tau_b(x, y), percentile_interval(tau_b_draws(x, y, counts)), int(x.size))
    r = Correlation(pearson_r(x, y), percentile_interval(pearson_draws(x, y, counts)), int(x.size))

    # Blocked: each drawn study brings its own (fixed) tau-b, so a resample is a
    # weighted mean over drawn studies; a study drawn twice counts twice.
    found = blocks(x, y, clusters)
    block_tau = np.zeros(len(clusters))
    block_weight = np.zeros(len(clusters))
    for tau_k, w_k, k in zip(found.taus, found.weights, found.studies):
        block_tau[k], block_weight[k] = tau_k, w_k
    first = np.array([c[0] for c in clusters], dtype=np.intp)
    times = counts[:, first]  # how often each study was drawn
    weight = times * block_weight
    total = weight.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        blocked_draws = np.where(total > 0, (weight * block_tau).sum(axis=1) / total, np.nan)
    return Agreement(
        tau_b=tau,
        blocked_tau_b=Correlation(found.value, percentile_interval(blocked_draws), found.candidates,
                                  blocks=len(found.studies)),
        pearson_r=r,
    )
