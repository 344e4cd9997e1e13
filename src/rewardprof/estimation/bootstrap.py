"""Intervals of `estimate` that do not assume the prior family: the useful fraction at K and the
GPU-hours, from the pilot's tasks alone.

Useful fraction at K (a task is useful when its K rollouts are not all equal):

* basis "direct" -- every pilot task has n >= K scored rollouts. Per task, the probability that
  K of its rollouts drawn without replacement are all passes or all failures,
  u = 1 - C(c, K) / C(n, K) - C(n - c, K) / C(n, K), is an unbiased estimate of that task's
  1 - p^K - (1 - p)^K whatever the shape of the label's pass rates, so their mean is unbiased
  for the useful fraction. Interval: the union of a percentile bootstrap over the pilot's tasks
  and the Clopper-Pearson interval of sum(u) "successes" in T tasks (u in [0, 1] has at most a
  Bernoulli's variance, so the latter is conservative; it keeps an all-fail or all-mixed pilot
  from a zero-width bootstrap interval).
* basis "extrapolated" -- some pilot task has fewer than K rollouts: how a task behaves over
  K > n rollouts is not in the data (a pass rate of 0 and one of 0.01 look alike in 4
  rollouts). The point value is the grid prior's (decisions/priors/grid.py, a discrete mixture
  on a grid of p: no parametric family) fitted on the pilot. Interval: on each bootstrap
  resample of the pilot's tasks, the range of the useful fraction over the resample's fit and
  that fit with its mass at p = 0 (or 1) moved to a small (large) p as far as the likelihood
  allows (within chi2_1(level) / 2 of the fit); the percentiles of those ranges' ends over the
  resamples, joined with the profile-likelihood range of the point-masses-plus-Beta family
  (estimation/signal.py). They span the "never" vs "rarely" passes that n rollouts cannot
  tell apart (a bootstrap of the fit alone covered 91 % at 1,000 pilot tasks off-family). It
  assumes the pass rates look like one of those shapes beyond what n rollouts show;
  docs/sizing.md says when to trust it.

GPU-hours: the pilot measured its GPU-hours per unit of cost (output tokens + 1 per rollout);
a label's GPU-hours for the sweep are its rollouts x its mean cost per rollout / that rate.
The interval bootstraps the label's mean cost per rollout over its pilot tasks (which tasks
the pilot happened to draw); the throughput itself is the pilot's one measurement.

Bootstrap resamples are drawn with a fixed seed: the same pilot gives the same estimate.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from rewardprof.decisions.priors.grid import GRID, em_weights, likelihood_matrix
from rewardprof.decisions.priors.posterior import grouped_counts
from rewardprof.decisions.statistics.binomial import clopper_pearson

REPLICATES = 2000  # direct basis: resampled means cost nothing
FIT_REPLICATES = 200  # extrapolated basis: one EM fit per resample (fitted all at once)
SEED = 20260  # resamples are part of the estimate: fixed


def _useful_exact(n: int, c: int, k: int) -> float:
    total = math.comb(n, k)
    return 1.0 - (math.comb(c, k) + math.comb(n - c, k)) / total


def _percentile(values: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _resampled_pairs(weights: list[float], replicates: int) -> np.ndarray:
    """Counts per distinct (n, c) of `replicates` resamples of the tasks with replacement."""
    counts = np.asarray(weights, dtype=float)
    rng = np.random.default_rng(SEED)
    return rng.multinomial(int(counts.sum()), counts / counts.sum(), size=replicates)


def useful_direct(counts: list[tuple[int, int]], k: int, level: float = 0.95) -> dict | None:
    """The direct-basis estimate (module doc), or None when some task has fewer than K scored
    rollouts (or none has any)."""
    pairs, weights = grouped_counts([x[0] for x in counts], [x[1] for x in counts])
    if not pairs or min(n for n, _ in pairs) < k:
        return None
    u = np.array([_useful_exact(n, c, k) for n, c in pairs])
    tasks = float(sum(weights))
    point = float(np.dot(weights, u) / tasks)
    boot = _resampled_pairs(weights, REPLICATES) @ u / tasks
    b_lo, b_hi = _percentile(boot, level)
    # Clopper-Pearson at a non-integer count: the beta quantiles take it as it is
    cp_lo, cp_hi = clopper_pearson(point * tasks, int(tasks), level)
    return {
        "useful_fraction": point,
        "low": min(b_lo, cp_lo),
        "high": max(b_hi, cp_hi),
        "basis": "direct",
    }


def grid_useful(weights: np.ndarray, k: int) -> np.ndarray:
    """E[1 - p^K - (1 - p)^K] under grid weights (one value per row of `weights`)."""
    return np.asarray(weights) @ (1.0 - GRID**k - (1.0 - GRID) ** k)


def useful_extrapolated(
    counts: list[tuple[int, int]], k: int, family_range: tuple[float, float], level: float = 0.95
) -> dict:
    """The extrapolated-basis estimate (module doc); `family_range`: the point-masses-plus-Beta
    profile-likelihood range of the useful fraction."""
    pairs, weights = grouped_counts([x[0] for x in counts], [x[1] for x in counts])
    if not pairs:
        return {"useful_fraction": None, "low": 0.0, "high": 1.0, "basis": "no scored rollouts"}
    lik = likelihood_matrix(pairs)
    point = float(grid_useful(em_weights(lik, np.asarray(weights, float)), k))
    slack = NormalDist().inv_cdf(0.5 + level / 2) ** 2 / 2
    resampled = _resampled_pairs(weights, FIT_REPLICATES)
    lows, highs = [], []
    # per resample: the range over its fit and that fit's edge moves (the bounds of what the
    # resample cannot rule out), then the percentiles of those bounds over the resamples
    for counts, fit in zip(resampled, em_weights(lik, resampled), strict=True):
        counts = counts.astype(float)
        floor = _log_lik(fit[None, :], lik, counts)[0] - slack
        values = grid_useful(_edge_moves(fit, lik, counts, floor), k)
        lows.append(values.min())
        highs.append(values.max())
    tail = (1 - level) / 2
    return {
        "useful_fraction": point,
        "low": float(min(np.quantile(lows, tail), family_range[0], point)),
        "high": float(max(np.quantile(highs, 1 - tail), family_range[1], point)),
        "basis": "extrapolated",
    }


# where "never passes" mass may really sit (and 1 - these for "always passes")
_RARELY = (0.005, 0.01, 0.02, 0.03, 0.06, 0.1)
_SHARES = np.linspace(0.0, 1.0, 201)


def _log_lik(w: np.ndarray, lik: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Log-likelihood of the pilot's pair counts under each row of grid weights."""
    with np.errstate(divide="ignore"):
        return np.log(w @ lik.T) @ counts


def _edge_moves(best: np.ndarray, lik: np.ndarray, counts: np.ndarray, floor: float) -> np.ndarray:
    """Grid weights with as much of the mass at p = 0 moved to a small p (and at 1 to a large
    one) as keeps the log-likelihood >= floor, one row per target point: few rollouts cannot
    tell "never passes" from "rarely passes", and the useful fraction at a larger K differs."""
    rows = []
    for end, sign in ((0, 1.0), (len(GRID) - 1, -1.0)):
        if best[end] <= 1e-9:
            continue
        for p in _RARELY:
            dst = int(np.argmin(np.abs(GRID - (p if sign > 0 else 1.0 - p))))
            moved = np.repeat(best[None, :], len(_SHARES), axis=0)
            moved[:, dst] += _SHARES * best[end]
            moved[:, end] -= _SHARES * best[end]
            allowed = np.flatnonzero(_log_lik(moved, lik, counts) >= floor)
            if len(allowed):
                rows.append(moved[allowed[-1]])
    return np.array(rows) if rows else best[None, :]


def cost_interval(task_costs: list[tuple[float, int]], level: float = 0.95) -> tuple[float, float]:
    """(low, high) of a label's mean cost per rollout relative to the pilot's value, from a
    bootstrap over its tasks; task_costs: (summed cost, rollouts) per pilot task (NaN when
    fewer than 2 tasks were recorded)."""
    cost = np.array([x[0] for x in task_costs], dtype=float)
    rollouts = np.array([x[1] for x in task_costs], dtype=float)
    if len(cost) < 2 or rollouts.sum() <= 0:
        return math.nan, math.nan  # no spread to resample: no interval (shown as "-")
    rng = np.random.default_rng(SEED)
    picks = rng.multinomial(len(cost), np.full(len(cost), 1.0 / len(cost)), size=REPLICATES)
    ratio = (picks @ cost) / np.maximum(picks @ rollouts, 1e-12)
    lo, hi = _percentile(ratio / (cost.sum() / rollouts.sum()), level)
    return lo, hi


def total_useful(parts: list[dict[str, float]]) -> dict[str, float]:
    """The useful tasks over labels: the sum of the point values, and an interval of about the
    labels' level, not the sum of their bounds (that is wider than the level claims: every
    label at its extreme at once). The labels' fits are independent, so their deviations add
    in quadrature on each side."""
    point = sum(p["useful_fraction"] for p in parts)
    below = math.sqrt(sum((p["useful_fraction"] - p["low"]) ** 2 for p in parts))
    above = math.sqrt(sum((p["high"] - p["useful_fraction"]) ** 2 for p in parts))
    return {"useful_fraction": point, "low": max(0.0, point - below), "high": point + above}
