"""A label's prior on the pass rate as a discrete mixture on a fixed grid of p, fitted by EM.

Model. Task pass rates p are drawn from sum_g w_g * delta(p_g) over GRID (p = 0 and p = 1
exactly, and interior points dense near both ends, where "never passes" and "rarely passes"
differ most for stopping); a task's c passes in n rollouts are Binomial(n, p). Point masses at
0 and 1, a Beta, two Betas or the off-family shapes users meet (p in {0, 0.03, 0.6}) are all
close to some member of this family, which is why adaptive stopping uses it rather than the
profile's point-masses-plus-one-Beta (decisions/priors/posterior.py).

Fit (`fit_grid`): the maximum a posteriori weights under a Dirichlet hyperprior
Dir(1 + strength * toward), by EM. With `toward` the pooled weights over every label and
`strength` a number of pseudo-tasks, a label's weights are shrunk toward the pooled prior
(empirical Bayes with a hyperprior): a label of few tasks stays near the pool, a large label
is fitted on its own data.

Pure numpy; the likelihood is evaluated per distinct (n, c), of which a label has at most
K^2/2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rewardprof.decisions.priors.posterior import grouped_counts
from rewardprof.decisions.statistics.binomial import log_choose

# p = 0, p = 1 and 39 interior points, cosine-spaced (dense near 0 and 1): the smallest
# interior point is ~0.0016, the largest gap (at 1/2) ~0.04
_T = np.linspace(0.0, 1.0, 41)
GRID = np.unique(np.concatenate([[0.0, 1.0], 0.5 * (1.0 - np.cos(np.pi * _T))]))
_EM_ITERATIONS = 3000
_EM_TOLERANCE = 1e-9


@dataclass(frozen=True)
class GridPrior:
    """sum_g weights[g] * delta(GRID[g]); `tasks`: how many tasks it was fitted on."""

    weights: tuple[float, ...]
    tasks: int = 0

    @property
    def w(self) -> np.ndarray:
        return np.asarray(self.weights, dtype=float)

    def as_dict(self) -> dict:
        return {"weights": [round(float(v), 12) for v in self.weights], "tasks": self.tasks}

    @classmethod
    def from_dict(cls, d: dict) -> GridPrior:
        weights = tuple(float(v) for v in d["weights"])
        if len(weights) != len(GRID):
            raise ValueError(f"grid prior with {len(weights)} weights, expected {len(GRID)}")
        return cls(weights, int(d.get("tasks", 0)))

    def posterior_weights(self, n: int, c: int) -> np.ndarray:
        """P(p = GRID[g] | c passes in n)."""
        log_w = _log(self.w) + _log_binomial_kernel(n, c)
        top = log_w.max()
        if not np.isfinite(top):  # no grid point explains (n, c): impossible under the prior
            return np.full(len(GRID), 1.0 / len(GRID))
        post = np.exp(log_w - top)
        return post / post.sum()

    def predictive(self, n: int, c: int, m: int) -> np.ndarray:
        """P(j more passes among m more rollouts | c passes in n), j = 0..m."""
        post = self.posterior_weights(n, c)
        j = np.arange(m + 1)
        coef = log_choose(m, j)
        kern = np.exp(coef[None, :] + _xlogy(j[None, :], GRID[:, None]))
        kern *= np.exp(_xlogy(m - j[None, :], 1.0 - GRID[:, None]))
        pmf = post @ kern
        return pmf / pmf.sum()

    def mean(self) -> float:
        return float(self.w @ GRID)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.choice(GRID, size=size, p=self.w / self.w.sum())


def predictive_many(weights: np.ndarray, n: int, c: int, m: int) -> np.ndarray:
    """GridPrior.predictive for many priors at once: `weights` [prior, g] -> [prior, j]."""
    log_w = _log(weights) + _log_binomial_kernel(n, c)[None, :]
    top = log_w.max(axis=1, keepdims=True)
    post = np.where(np.isfinite(top), np.exp(log_w - np.where(np.isfinite(top), top, 0.0)), 1.0)
    post /= post.sum(axis=1, keepdims=True)
    j = np.arange(m + 1)
    kern = np.exp(log_choose(m, j)[None, :] + _xlogy(j[None, :], GRID[:, None]))
    kern *= np.exp(_xlogy(m - j[None, :], 1.0 - GRID[:, None]))
    pmf = post @ kern
    return pmf / pmf.sum(axis=1, keepdims=True)


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def _xlogy(x, y) -> np.ndarray:
    """x * log(y) with 0 * log(0) = 0."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x * np.log(y))


def _log_binomial_kernel(n: int, c: int) -> np.ndarray:
    """log p^c (1-p)^(n-c) on GRID (the binomial coefficient left out)."""
    return _xlogy(c, GRID) + _xlogy(n - c, 1.0 - GRID)


def likelihood_matrix(pairs: list[tuple[int, int]]) -> np.ndarray:
    """[pair, g] = p_g^c (1-p_g)^(n-c)."""
    return np.exp(np.array([_log_binomial_kernel(n, c) for n, c in pairs]))


def log_likelihood(weights: np.ndarray, lik: np.ndarray, counts: np.ndarray) -> float:
    """sum over distinct pairs of count * log sum_g w_g lik[pair, g]."""
    with np.errstate(divide="ignore"):
        return float(counts @ np.log(lik @ weights))


def em_weights(
    lik: np.ndarray,
    counts: np.ndarray,
    toward: np.ndarray | None = None,
    strength: float = 0.0,
) -> np.ndarray:
    """MAP grid weights under Dir(1 + strength * toward) by EM (deterministic: uniform start;
    `toward` None: uniform). `counts` may be a matrix (one row of pair counts per fit, e.g.
    bootstrap resamples): then one row of weights per fit, all fitted at once."""
    size = lik.shape[1]
    toward = np.full(size, 1.0 / size) if toward is None else np.asarray(toward, float)
    prior_counts = strength * toward
    counts2 = np.atleast_2d(np.asarray(counts, dtype=float))
    w = np.full((len(counts2), size), 1.0 / size)
    for _ in range(_EM_ITERATIONS):
        mix = w @ lik.T  # [fit, pair]
        resp = (counts2 / np.where(mix > 0, mix, 1.0)) @ lik * w  # sum_i count_i r_ig
        new = resp + prior_counts
        new = new / np.maximum(new.sum(axis=1, keepdims=True), 1e-300)
        change = float(np.abs(new - w).max())
        w = new
        if change < _EM_TOLERANCE:
            break
    return w if np.ndim(counts) == 2 else w[0]


def fit_grid(n, c, toward: np.ndarray | None = None, strength: float = 0.0) -> GridPrior:
    """The grid prior of per-task (n, c) (tasks with n == 0 ignored), shrunk toward `toward`
    with `strength` pseudo-tasks; no tasks: `toward` itself (uniform when None)."""
    pairs, weights = grouped_counts(n, c)
    if not pairs:
        w = np.full(len(GRID), 1.0 / len(GRID)) if toward is None else np.asarray(toward)
        return GridPrior(tuple(float(v) for v in w), 0)
    counts = np.asarray(weights, dtype=float)
    w = em_weights(likelihood_matrix(pairs), counts, toward, strength)
    return GridPrior(tuple(float(v) for v in w), int(counts.sum()))
