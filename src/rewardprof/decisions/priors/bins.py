"""A label's pass-rate prior as a histogram: point masses at 0 and 1 plus a piecewise-constant
density on bins of (0, 1), fitted by EM; and the credible intervals of tasks' posteriors under it.

Why. The profile's prior family (decisions/priors/posterior.py: point masses plus one Beta)
cannot fit every label (p in {0, 0.03, 0.6}, two clusters of hard and easy tasks), and its
intervals then cover far less than their level however many tasks the label has. A histogram on
fine bins fits any shape given enough tasks, and unlike a discrete grid (decisions/priors/grid.py)
it keeps a density inside each bin, so an interval is not pinned to grid points a true p falls
between. The profile reports, per task, the hull of the family's interval and this one
(`profile_intervals`, stages/profile.py), and measures the coverage by simulation
(benchmarks/bench_coverage.py, docs/profile.md).

Likelihood of c passes in n rollouts under bin [l, h): the binomial kernel averaged over it,
  (1 / (h - l)) * integral_l^h p^c (1-p)^(n-c) dp = B(c+1, n-c+1) (I_h - I_l) / (h - l),
with I_x = I_x(c+1, n-c+1) = P(Binomial(n+1, x) >= c+1) for integer counts (no special
functions). The posterior is the mixture over bins of the kernel truncated to each bin.

Fit: EM on the weights of the bins and the two point masses, with SMOOTHING pseudo-tasks spread
uniformly (a Dirichlet hyperprior): no bin is set exactly to zero by a finite sample.
"""

from __future__ import annotations

import math

import numpy as np

from rewardprof.decisions.priors.grid import em_weights
from rewardprof.decisions.priors.posterior import grouped_counts
from rewardprof.decisions.statistics.binomial import log_choose
from rewardprof.decisions.statistics.solvers import bisect

_T = np.linspace(0.0, 1.0, 41)
# bin edges, cosine-spaced (narrow near 0 and 1, where pass rates pile up): 40 bins
EDGES = 0.5 * (1.0 - np.cos(np.pi * _T))
EDGES[0], EDGES[-1] = 0.0, 1.0
SMOOTHING = 1.0


def binomial_upper_tail(n: int, c: int, x) -> np.ndarray:
    """I_x(c+1, n-c+1) = P(Binomial(n+1, x) >= c+1), elementwise over x."""
    x = np.atleast_1d(np.asarray(x, dtype=float))
    m = n + 1
    j = np.arange(c + 1, m + 1)
    coef = log_choose(m, j)
    with np.errstate(divide="ignore", invalid="ignore"):
        lx, l1x = np.log(x)[:, None], np.log1p(-x)[:, None]
        terms = np.exp(coef[None, :] + j[None, :] * lx + (m - j)[None, :] * l1x)
    terms = np.nan_to_num(terms, nan=0.0)
    out = terms.sum(axis=1)
    out[x <= 0.0] = 0.0
    out[x >= 1.0] = 1.0
    return np.clip(out, 0.0, 1.0)


def _kernel_mass(n: int, c: int) -> np.ndarray:
    """Per component [p=0, bins..., p=1]: the likelihood of (n, c) without the binomial
    coefficient, i.e. p^c (1-p)^(n-c) at the point masses and its bin average on the bins."""
    tail = binomial_upper_tail(n, c, EDGES)
    beta = math.exp(math.lgamma(c + 1) + math.lgamma(n - c + 1) - math.lgamma(n + 2))
    bins = beta * np.diff(tail) / np.diff(EDGES)
    return np.concatenate([[1.0 if c == 0 else 0.0], bins, [1.0 if c == n else 0.0]])


def fit_bins(n, c) -> np.ndarray:
    """Weights [p=0, 40 bins, p=1] fitted on per-task (n, c) (n == 0 ignored); no tasks: the
    smoothing alone (uniform)."""
    pairs, counts = grouped_counts(n, c)
    size = len(EDGES) + 1
    if not pairs:
        return np.full(size, 1.0 / size)
    lik = np.array([_kernel_mass(a, b) for a, b in pairs])
    return em_weights(lik, np.asarray(counts, dtype=float), None, SMOOTHING)


def _posterior_cdf(weights: np.ndarray, n: int, c: int):
    """(cdf function, posterior component weights) of a task's pass rate after (n, c)."""
    post = weights * _kernel_mass(n, c)
    post = post / post.sum()
    tail = binomial_upper_tail(n, c, EDGES)
    within = np.diff(tail)
    below = np.concatenate([[post[0]], post[0] + np.cumsum(post[1:-1])])  # cdf at each edge

    def cdf(x: float) -> float:
        if x >= 1.0:
            return 1.0
        g = int(np.clip(np.searchsorted(EDGES, x, side="right") - 1, 0, len(EDGES) - 2))
        part = 0.0
        if within[g] > 0:
            part = (binomial_upper_tail(n, c, x)[0] - tail[g]) / within[g]
        return float(below[g] + post[g + 1] * min(max(part, 0.0), 1.0))

    return cdf, post


def _quantile(cdf, q: float) -> float:
    if cdf(0.0) >= q:
        return 0.0
    if cdf(1.0 - 1e-15) < q:
        return 1.0
    return bisect(cdf, q)


def bin_interval(weights: np.ndarray, n: int, c: int, level: float) -> tuple[float, float]:
    """Equal-tailed credible interval of a task's pass rate after (n, c) under the histogram
    prior (closed at the point masses, as the profile's)."""
    cdf, _ = _posterior_cdf(weights, n, c)
    tail = (1.0 - level) / 2
    return _quantile(cdf, tail), _quantile(cdf, 1.0 - tail)


def bin_intervals(weights: np.ndarray, n, c, level: float) -> tuple[np.ndarray, np.ndarray]:
    """bin_interval per task (arrays n, c; NaN where n == 0), computed once per distinct pair."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    lo, hi = np.full(len(n), np.nan), np.full(len(n), np.nan)
    if not len(n):
        return lo, hi
    keys, inverse = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    for i, (nn, cc) in enumerate(keys):
        if nn > 0:
            rows = inverse == i
            lo[rows], hi[rows] = bin_interval(weights, int(nn), int(cc), level)
    return lo, hi


# below this many scored tasks a label's widened intervals were measured to cover less than
# 93 % at the 95 % level in some shape (benchmarks/bench_coverage.py): flagged, not vouched for
COVERAGE_MIN_TASKS = 300


def widened(n, c, low, high, level: float) -> tuple[np.ndarray, np.ndarray, str]:
    """A label's credible intervals widened to the hull of the family's (low, high) and the
    histogram prior's, fitted on the label's own tasks; and its coverage flag: "widened", or
    "may_undercover" below COVERAGE_MIN_TASKS scored tasks."""
    n = np.asarray(n, dtype=np.int64)
    b_lo, b_hi = bin_intervals(fit_bins(n, c), n, c, level)
    flag = "widened" if int((n > 0).sum()) >= COVERAGE_MIN_TASKS else "may_undercover"
    return np.fmin(low, b_lo), np.fmax(high, b_hi), flag
