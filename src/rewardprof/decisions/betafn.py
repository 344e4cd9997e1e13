"""Beta functions without scipy: log B(a, b), the regularized incomplete beta I_x(a, b) and
Beta quantiles, plus a small derivative-free minimizer (Nelder-Mead) for the prior fit.

The core install has no scipy (numpy, pandas, pyarrow only); the posterior needs these few
functions on at most a few hundred distinct arguments per label, so scalar code is fast enough.
I_x(a, b) is the continued fraction of Numerical Recipes (modified Lentz), accurate to ~1e-13
for the a, b < 1e4 a profile produces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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


def bisect(f: Callable[[float], float], target: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """The x in [lo, hi] where the nondecreasing f crosses target (60 halvings: ~1e-18)."""
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def nelder_mead(
    f: Callable[[Sequence[float]], float],
    x0: Sequence[float],
    step: float = 0.5,
    max_iter: int = 2000,
    tol: float = 1e-10,
) -> list[float]:
    """Minimize f from x0 (deterministic: same input, same answer; no randomness)."""
    dim = len(x0)
    simplex = [list(x0)] + [
        [x + (step if j == i else 0.0) for j, x in enumerate(x0)] for i in range(dim)
    ]
    values = [f(p) for p in simplex]
    for _ in range(max_iter):
        order = sorted(range(dim + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tol * (1.0 + abs(values[0])):
            break
        centroid = [sum(p[j] for p in simplex[:-1]) / dim for j in range(dim)]
        worst = simplex[-1]

        def toward(t: float, worst=worst, centroid=centroid) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centroid, worst, strict=True)]

        reflected = toward(-1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = toward(-2.0)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = toward(0.5)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink toward the best point
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (x - b) for b, x in zip(best, p, strict=True)] for p in simplex[1:]
                ]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(dim + 1), key=values.__getitem__)]
