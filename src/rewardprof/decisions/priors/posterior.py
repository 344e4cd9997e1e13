"""Per-label empirical-Bayes prior on the pass rate, and per-task posteriors under it.

Model. Within one label, task pass rates p are drawn from a prior
    w0 * delta(0) + w1 * delta(1) + wb * Beta(a, b)        (w0 + w1 + wb = 1)
(point masses: tasks the policy never / always solves; the Beta: the rest), and a task's c passes
out of n scored rollouts are Binomial(n, p) given p. The prior is fitted by maximizing the
marginal likelihood of every task's (n, c) of the label (`fit_prior`), then each task's
posterior is again such a mixture:
    pi0 * delta(0) + pi1 * delta(1) + pib * Beta(a + c, b + n - c)
with pi0 > 0 only if c == 0 and pi1 > 0 only if c == n (`posterior`).

Quantities (all closed forms through Beta functions, see docs/profile.md):
* mean: pi1 + pib (a + c) / (a + b + n)
* equal-tailed credible interval: quantiles of the mixture's CDF
* expected GRPO signal at group size G, E[1 - p^G - (1-p)^G]: for Beta(al, be)
  1 - B(al + G, be) / B(al, be) - B(al, be + G) / B(al, be); the point masses give 0
* P(signal >= s): signal(p) is symmetric about 1/2 and increasing on [0, 1/2], so it is
  P(p_s <= p <= 1 - p_s) with p_s the root of signal(p) = s on [0, 1/2]
* the predictive distribution of passes among m more rollouts (beta-binomial + point masses),
  which adaptive stopping uses.

Everything here is pure (no I/O) and scalar per distinct (n, c): a label has at most K^2/2 of
those, so the array forms (`posterior_columns`) cost nothing per task.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from rewardprof.decisions.statistics.betafn import betainc, betaln
from rewardprof.decisions.statistics.binomial import log_choose
from rewardprof.decisions.statistics.solvers import bisect, nelder_mead

_BOUND_LOG_AB = (math.log(0.02), math.log(1000.0))
_BOUND_LOGIT = 25.0


@dataclass(frozen=True)
class MixturePrior:
    """w0 * delta(0) + w1 * delta(1) + (1 - w0 - w1) * Beta(a, b); `tasks`: how many tasks
    (with at least one scored rollout) it was fitted on."""

    w0: float
    w1: float
    a: float
    b: float
    tasks: int = 0

    @property
    def wb(self) -> float:
        return max(0.0, 1.0 - self.w0 - self.w1)

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 12) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> MixturePrior:
        return cls(
            float(d["w0"]), float(d["w1"]), float(d["a"]), float(d["b"]), int(d.get("tasks", 0))
        )


# Jeffreys' prior on p: what a label without data gets, and what the reward-mode view uses
JEFFREYS = MixturePrior(0.0, 0.0, 0.5, 0.5)


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def _component_logs(prior: MixturePrior, n: int, c: int) -> list[float]:
    """log of each component's weight x marginal likelihood of (n, c) (the binomial coefficient,
    common to all three, left out)."""
    return [
        _log(prior.w0) if c == 0 else -math.inf,
        _log(prior.w1) if c == n else -math.inf,
        _log(prior.wb) + betaln(prior.a + c, prior.b + n - c) - betaln(prior.a, prior.b),
    ]


def log_likelihood(
    prior: MixturePrior, pairs: list[tuple[int, int]], weights: list[float]
) -> float:
    """sum of weight * log marginal likelihood over distinct (n, c) pairs. Vectorized: for
    integer n, c, B(a + c, b + n - c) / B(a, b) = prod_{i<c} (a + i) prod_{j<n-c} (b + j) /
    prod_{k<n} (a + b + k), so three cumulative sums of logs give every pair's Beta term
    (the prior fit evaluates this thousands of times)."""
    if not len(pairs):
        return 0.0
    nc = np.asarray(pairs, dtype=np.int64)
    return _log_likelihood(prior, nc[:, 0], nc[:, 1], np.asarray(weights, dtype=float))


def _log_likelihood(prior: MixturePrior, n: np.ndarray, c: np.ndarray, w: np.ndarray) -> float:
    steps = np.arange(int(n.max()), dtype=float)

    def cum_log(x: float) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(np.log(x + steps))])

    log_beta = cum_log(prior.a)[c] + cum_log(prior.b)[n - c] - cum_log(prior.a + prior.b)[n]
    with np.errstate(divide="ignore"):
        parts = np.stack(
            [
                np.where(c == 0, np.log(prior.w0), -np.inf),
                np.where(c == n, np.log(prior.w1), -np.inf),
                np.log(prior.wb) + log_beta,
            ]
        )
    top = parts.max(axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    per_pair = safe + np.log(np.exp(parts - safe).sum(axis=0))
    return float(np.dot(w, per_pair))


def grouped_counts(n, c) -> tuple[list[tuple[int, int]], list[float]]:
    """The distinct (n, c) pairs with n > 0 and how many tasks have each."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    keep = n > 0
    if not keep.any():
        return [], []
    pairs, counts = np.unique(np.stack([n[keep], c[keep]], axis=1), axis=0, return_counts=True)
    return [(int(a), int(b)) for a, b in pairs], [float(k) for k in counts]


def prior_from_theta(theta, tasks: int = 0) -> MixturePrior:
    """The prior of unconstrained parameters (logit w0, logit w1 against wb; log a; log b),
    clipped to the fitted range."""
    t0, t1, la, lb = (float(v) for v in theta)
    t0, t1 = (min(max(t, -_BOUND_LOGIT), _BOUND_LOGIT) for t in (t0, t1))
    la, lb = (min(max(v, _BOUND_LOG_AB[0]), _BOUND_LOG_AB[1]) for v in (la, lb))
    z = 1.0 + math.exp(t0) + math.exp(t1)
    return MixturePrior(math.exp(t0) / z, math.exp(t1) / z, math.exp(la), math.exp(lb), tasks)


def theta_of(prior: MixturePrior) -> list[float]:
    """The inverse of prior_from_theta (within its range)."""
    wb = max(prior.wb, 1e-12)
    return [
        math.log(max(prior.w0, 1e-12) / wb),
        math.log(max(prior.w1, 1e-12) / wb),
        math.log(prior.a),
        math.log(prior.b),
    ]


def fit_prior(n, c) -> MixturePrior:
    """Maximum-marginal-likelihood mixture prior from per-task (n, c) (tasks with n == 0 are
    ignored; none left: Jeffreys). Deterministic: a few fixed starts, Nelder-Mead from each."""
    pairs, weights = grouped_counts(n, c)
    if not pairs:
        return JEFFREYS
    tasks = int(sum(weights))

    nc = np.asarray(pairs, dtype=np.int64)
    n_arr, c_arr, w_arr = nc[:, 0], nc[:, 1], np.asarray(weights, dtype=float)

    def objective(theta) -> float:
        return -_log_likelihood(prior_from_theta(theta, tasks), n_arr, c_arr, w_arr)

    share0 = sum(w for (_, k), w in zip(pairs, weights, strict=True) if k == 0) / tasks
    share1 = sum(w for (m, k), w in zip(pairs, weights, strict=True) if k == m) / tasks
    starts = []
    for frac in (0.5, 0.9):
        w0, w1 = share0 * frac, share1 * frac
        wb = max(1.0 - w0 - w1, 1e-3)
        t0, t1 = math.log(max(w0, 1e-6) / wb), math.log(max(w1, 1e-6) / wb)
        starts += [[t0, t1, 0.0, 0.0], [t0, t1, math.log(0.5), math.log(0.5)]]
    best = min((nelder_mead(objective, s) for s in starts), key=objective)
    return prior_from_theta(best, tasks)


@dataclass(frozen=True)
class Posterior:
    """pi0 * delta(0) + pi1 * delta(1) + pib * Beta(alpha, beta)."""

    pi0: float
    pi1: float
    pib: float
    alpha: float
    beta: float

    def mean(self) -> float:
        return self.pi1 + self.pib * self.alpha / (self.alpha + self.beta)

    def cdf(self, x: float) -> float:
        if x < 0:
            return 0.0
        return (
            self.pi0 + self.pib * betainc(self.alpha, self.beta, x) + (self.pi1 if x >= 1 else 0.0)
        )

    def quantile(self, q: float) -> float:
        """inf{x : cdf(x) >= q}."""
        if self.cdf(0.0) >= q:
            return 0.0
        if self.cdf(1.0 - 1e-15) < q:
            return 1.0
        return bisect(self.cdf, q)

    def interval(self, level: float) -> tuple[float, float]:
        """Equal-tailed credible interval (closed at a point mass, so [0, x] can hold p = 0)."""
        tail = (1.0 - level) / 2
        return self.quantile(tail), self.quantile(1.0 - tail)

    def _beta_moment_ratio(self, da: int, db: int) -> float:
        return math.exp(betaln(self.alpha + da, self.beta + db) - betaln(self.alpha, self.beta))

    def expected_signal(self, group_size: int) -> float:
        """E[1 - p^G - (1-p)^G] (the point masses carry no signal)."""
        g = group_size
        return self.pib * (1.0 - self._beta_moment_ratio(g, 0) - self._beta_moment_ratio(0, g))

    def prob_signal_at_least(self, group_size: int, s: float) -> float:
        """P(1 - p^G - (1-p)^G >= s)."""
        if s <= 0:
            return 1.0
        p_s = signal_root(group_size, s)
        if p_s is None:
            return 0.0
        inside = betainc(self.alpha, self.beta, 1.0 - p_s) - betainc(self.alpha, self.beta, p_s)
        return self.pib * max(0.0, inside)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """size draws of p (for Monte Carlo checks and simulations)."""
        u = rng.random(size)
        beta = rng.beta(self.alpha, self.beta, size)
        return np.where(u < self.pi0, 0.0, np.where(u < self.pi0 + self.pi1, 1.0, beta))

    def predictive(self, m: int) -> np.ndarray:
        """P(x passes among m more rollouts), x = 0..m."""
        x = np.arange(m + 1)
        base = betaln(self.alpha, self.beta)
        bb = np.array(
            [
                math.exp(lc + betaln(self.alpha + k, self.beta + m - k) - base)
                for k, lc in zip(x, log_choose(m, x), strict=True)
            ]
        )
        pmf = self.pib * bb
        pmf[0] += self.pi0
        pmf[m] += self.pi1
        return pmf / pmf.sum()


@lru_cache(maxsize=256)
def signal_root(group_size: int, s: float) -> float | None:
    """p in [0, 1/2] with 1 - p^G - (1-p)^G = s; None when s exceeds the maximum 1 - 2^(1-G)."""
    g = group_size
    # s >= 1 is beyond the maximum too, even where 1 - 2^(1-G) rounds to 1.0 (G >= 54)
    if s >= 1.0 or s > 1.0 - 2.0 ** (1 - g):
        return None
    return bisect(lambda p: 1.0 - p**g - (1.0 - p) ** g, s, 0.0, 0.5)


def posterior(prior: MixturePrior, n: int, c: int) -> Posterior:
    """The task's posterior after c passes in n scored rollouts."""
    logs = _component_logs(prior, n, c)
    total = _logsumexp(logs)
    if total == -math.inf:
        # no component explains (n, c) (a prior without Beta weight, given mixed results):
        # the data rule out the point masses, so the Beta part alone is left
        return Posterior(0.0, 0.0, 1.0, prior.a + c, prior.b + n - c)
    pi0, pi1, pib = (math.exp(v - total) if v > -math.inf else 0.0 for v in logs)
    return Posterior(pi0, pi1, pib, prior.a + c, prior.b + n - c)


def prior_as_posterior(prior: MixturePrior) -> Posterior:
    """The prior itself (no rollouts seen), e.g. to predict a new task of the label."""
    return Posterior(prior.w0, prior.w1, prior.wb, prior.a, prior.b)


POSTERIOR_COLUMNS = ("post_mean", "post_ci_low", "post_ci_high", "post_signal", "post_p_signal")


def posterior_columns(
    prior: MixturePrior, n, c, *, level: float, group_size: int, min_signal: float
) -> dict[str, np.ndarray]:
    """Per task (arrays n, c): posterior mean, credible interval at `level`, expected signal
    at `group_size` and P(signal >= min_signal); NaN where n == 0 is impossible (the prior
    itself then answers: a task without rollouts is a new draw from its label)."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    out = {k: np.full(len(n), np.nan) for k in POSTERIOR_COLUMNS}
    if not len(n):
        return out
    keys, inverse = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    rows = []
    for nn, cc in keys:
        post = posterior(prior, int(nn), int(cc))
        lo, hi = post.interval(level)
        rows.append(
            (
                post.mean(),
                lo,
                hi,
                post.expected_signal(group_size),
                post.prob_signal_at_least(group_size, min_signal),
            )
        )
    table = np.array(rows, dtype=float)[inverse.reshape(-1)]
    return {k: table[:, i] for i, k in enumerate(POSTERIOR_COLUMNS)}
