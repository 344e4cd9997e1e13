"""Binomial helpers shared by the priors and the audit: log C(m, j), and the exact
(Clopper-Pearson) interval of a count by Beta quantiles."""

from __future__ import annotations

import math

import numpy as np

from rewardprof.decisions.statistics.betafn import betainc
from rewardprof.decisions.statistics.solvers import bisect

CONFIDENCE = 0.95


def log_choose(m: int, j: np.ndarray) -> np.ndarray:
    """log C(m, j) for every j (lgamma; exact enough for the m <= 4096 rollouts of a task).
    The denominator is summed first, as the histogram prior always did: its credible intervals
    (profile columns) keep their bits."""
    return math.lgamma(m + 1) - np.array([math.lgamma(k + 1) + math.lgamma(m - k + 1) for k in j])


def clopper_pearson(flips: int, total: int, level: float = CONFIDENCE) -> tuple[float, float]:
    """Exact binomial interval for flips / total (Beta quantiles of the binomial tails)."""
    if total == 0:
        return 0.0, 1.0
    tail = (1.0 - level) / 2
    lo = 0.0 if flips == 0 else _beta_quantile(tail, flips, total - flips + 1)
    hi = 1.0 if flips == total else _beta_quantile(1.0 - tail, flips + 1, total - flips)
    return lo, hi


def _beta_quantile(q: float, a: float, b: float) -> float:
    return bisect(lambda x: betainc(a, b, x), q, 0.0, 1.0)
