"""Beta functions without scipy: log B(a, b) and the regularized incomplete beta I_x(a, b) (Beta
quantiles by inverting it: decisions/statistics/solvers.py's bisection).

The core install has no scipy (numpy, pandas, pyarrow only); the posterior needs these few
functions on at most a few hundred distinct arguments per label, so scalar code is fast enough.
I_x(a, b) is the continued fraction of Numerical Recipes (modified Lentz), accurate to ~1e-13
for the a, b < 1e4 a profile produces.
"""

from __future__ import annotations

import math

_TINY = 1e-300
_EPS = 1e-15


def betaln(a: float, b: float) -> float:
    """log B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b)."""
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) = P(X <= x) for X ~ Beta(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - betaln(a, b))
    # the fraction converges fast on the side of the mean; use the symmetry I_x = 1 - I_{1-x}
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b
