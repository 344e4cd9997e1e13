"""Per-task statistics: unbiased pass@k, pass-rate confidence intervals, GRPO signal."""

from __future__ import annotations

import math

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k); None when n < k."""
    if n < k or n <= 0:
        return None
    if n - c < k:
        return 1.0
    # product form avoids huge binomials: C(n-c,k)/C(n,k) = prod_{i=n-c+1}^{n} (1 - k/i)
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def wilson_interval(c: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    if n <= 0:
        return None
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = c / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def beta_interval(c: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Clopper-Pearson (exact) interval from Beta quantiles."""
    if n <= 0:
        return None
    from scipy.stats import beta  # optional: only for ci_method: beta

    alpha = 1 - level
    lo = 0.0 if c == 0 else float(beta.ppf(alpha / 2, c, n - c + 1))
    hi = 1.0 if c == n else float(beta.ppf(1 - alpha / 2, c + 1, n - c))
    return lo, hi


def grpo_signal(p: float | None, group_size: int) -> float | None:
    """P(a group of G binary samples has any reward variance) = 1 - p^G - (1-p)^G."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return None
    return 1.0 - p**group_size - (1.0 - p) ** group_size
