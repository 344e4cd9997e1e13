"""Two solvers without scipy: bisection for a monotone function's crossing (quantiles, interval
ends, signal roots) and a small derivative-free minimizer (Nelder-Mead) for the prior fits.
Both deterministic: the same input gives the same answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def bisect(
    f: Callable[[float], float],
    target: float,
    lo: float = 0.0,
    hi: float = 1.0,
    increasing: bool = True,
) -> float:
    """The x in [lo, hi] where the monotone f (nondecreasing, else nonincreasing) crosses
    target (60 halvings: ~1e-18)."""
    for _ in range(60):
        mid = (lo + hi) / 2
        if (f(mid) < target) == increasing:
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
