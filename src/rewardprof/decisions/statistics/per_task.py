"""Per-task statistics: unbiased pass@k, pass-rate confidence intervals, GRPO signal.

Each statistic has a scalar form (the definition, unit-tested against hand-computed values) and
an array form used by the profile (one call per column over all tasks: the scalar form runs once
per distinct (n, c) pair, of which there are at most ~K^2/2, never once per task or rollout).

GRPO signal. GRPO normalizes each reward by its group's mean and std, so a group of G samples
of one task carries a gradient only when its rewards are not all identical. The signal of a task
is the probability of that event:

* binary rewards with pass rate p:  1 - p^G - (1 - p)^G                 (`grpo_signal`)
* any rewards (partial credit, judge scores): with q_v the share of the task's rollouts whose
  reward is v, 1 - sum_v q_v^G                                        (`grpo_signal_from_counts`)

The second is the plug-in estimate from the empirical reward distribution and reduces to the
first for 0/1 rewards. Both are 0 for a task whose rollouts all got the same reward.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from rewardprof.decisions.statistics.solvers import bisect


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k); None when n < k."""
    if n < k or n <= 0:
        return None
    if n - c < k:
        return 1.0
    # product form avoids huge binomials: C(n-c,k)/C(n,k) = prod_{i=n-c+1}^{n} (1 - k/i)
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def _z(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2)


def wilson_interval(c: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval for c successes out of n; None when n == 0."""
    if n <= 0:
        return None
    lo, hi = wilson_arrays(np.array([c]), np.array([n]), level)
    return float(lo[0]), float(hi[0])


def _binom_sf(c: int, n: int, p: float) -> float:
    """P(X >= c) for X ~ Binomial(n, p), summed in log space (stable for large n)."""
    if p <= 0.0:
        return 1.0 if c <= 0 else 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    lg = math.lgamma(n + 1)
    return sum(
        math.exp(lg - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq)
        for j in range(max(c, 0), n + 1)
    )


def beta_interval(c: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Clopper-Pearson (exact) interval: the Beta(c, n-c+1) and Beta(c+1, n-c) quantiles,
    found by inverting the binomial tail (no scipy). None when n == 0."""
    if n <= 0:
        return None
    a = (1 - level) / 2
    # lower: P(X >= c | p) = a (increasing in p); upper: P(X <= c | p) = a (decreasing in p)
    lo = 0.0 if c == 0 else bisect(lambda p: _binom_sf(c, n, p), a)
    hi = 1.0 if c == n else bisect(lambda p: 1.0 - _binom_sf(c + 1, n, p), a, increasing=False)
    return lo, hi


def grpo_signal(p: float | None, group_size: int) -> float | None:
    """P(a group of G binary samples has any reward variance) = 1 - p^G - (1-p)^G."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return None
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def grpo_signal_from_counts(counts: list[int] | np.ndarray, group_size: int) -> float | None:
    """1 - sum_v q_v^G, q_v = counts[v] / sum(counts): the chance that G samples drawn from the
    task's empirical reward distribution are not all equal. None without rollouts."""
    counts = np.asarray(counts, dtype=float)
    total = counts.sum()
    if total <= 0:
        return None
    return float(1.0 - np.sum((counts / total) ** group_size))


# --- array forms (what the profile uses) ---------------------------------------------------


def _per_pair(n: np.ndarray, c: np.ndarray, fn) -> np.ndarray:
    """Apply fn(n, c) -> tuple of floats once per distinct (n, c) pair; stack the results."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if n.size == 0:
        return np.empty((0, 1))
    # one int64 key per pair: np.unique on rows (axis=0) is ~100x slower
    width = int(c.max()) + 2 if c.size else 1
    keys, inverse = np.unique(n * width + (c + 1), return_inverse=True)
    values = np.array([fn(int(key // width), int(key % width) - 1) for key in keys], dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    return values[inverse.reshape(-1)]


def pass_at_k_array(n, c, k: int) -> np.ndarray:
    """pass@k for every (n, c); NaN where undefined (n < k)."""

    def one(a: int, b: int) -> float:
        v = pass_at_k(a, b, k)
        return math.nan if v is None else v

    return _per_pair(n, c, one)[:, 0]


def wilson_arrays(c, n, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson bounds for every (c, n); NaN where n == 0."""
    c = np.asarray(c, dtype=float)
    n = np.asarray(n, dtype=float)
    z = _z(level)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = c / n
        denom = 1 + z * z / n
        center = (p + z * z / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
        lo = np.clip(center - half, 0.0, 1.0)
        hi = np.clip(center + half, 0.0, 1.0)
    lo[n <= 0] = np.nan
    hi[n <= 0] = np.nan
    return lo, hi


def interval_arrays(
    c, n, level: float = 0.95, method: str = "wilson"
) -> tuple[np.ndarray, np.ndarray]:
    """Confidence bounds on the pass rate c/n for every task (`wilson` or `beta`)."""
    if method == "wilson":
        return wilson_arrays(c, n, level)
    if method != "beta":
        raise ValueError(f"unknown interval method {method!r}")

    def one(a: int, b: int) -> tuple[float, float]:
        return beta_interval(b, a, level) or (math.nan, math.nan)

    out = _per_pair(n, c, one)
    return out[:, 0], out[:, 1]


def grpo_signal_array(p, group_size: int) -> np.ndarray:
    """1 - p^G - (1-p)^G elementwise; NaN stays NaN."""
    p = np.asarray(p, dtype=float)
    return 1.0 - p**group_size - (1.0 - p) ** group_size
