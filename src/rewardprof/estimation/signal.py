"""What a pilot says about the full sweep's tasks: the useful fraction at the target K with an
interval, and the rollouts adaptive sampling would spend.

Useful fraction at K: the share of tasks whose K rollouts are not all equal (so GRPO, and the
export's default rules, can use them): E[1 - p^K - (1-p)^K] over the label's pass rates, a task
of the full sweep being a new draw from the label. Estimated without assuming the prior family
(estimation/bootstrap.py: directly from the pilot's tasks when they have K rollouts, else
extrapolated). The extrapolated interval includes the profile-likelihood range of the
point-masses-plus-Beta family (decisions/priors/posterior.py): the smallest and largest useful
fraction over the priors whose marginal log-likelihood of the pilot is within chi2_1(level) / 2 of
the maximum (1.92 at 95 %). An all-fail pilot thus gives [0, upper bound] rather than "no useful
task": 12 tasks x 4 rollouts, all failed, still allow a large share of tasks with a small pass
rate.

Adaptive rollouts: the expected rollouts per task of the `exact` and `bayes` stopping tests
(decisions/planning/stop_tests.py) under the fitted prior, computed exactly over the distribution
of (n, c) states round by round (each state's next round from its posterior predictive), no
simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
import pandas as pd

from rewardprof.decisions.planning.stop_budget import Rounds, expected_share, stop_threshold
from rewardprof.decisions.planning.stop_tests import bayes_stop, exact_stop
from rewardprof.decisions.priors.grid import GRID, fit_grid
from rewardprof.decisions.priors.label import fit_label_priors
from rewardprof.decisions.priors.posterior import (
    MixturePrior,
    fit_prior,
    grouped_counts,
    log_likelihood,
    posterior,
    prior_as_posterior,
    prior_from_theta,
    theta_of,
)
from rewardprof.decisions.statistics.solvers import nelder_mead
from rewardprof.estimation.bootstrap import useful_direct, useful_extrapolated

ROUND_SIZE = 2  # rollouts per task per adaptive round after the first (adaptive.round_size)


def useful_at(prior: MixturePrior, k: int) -> float:
    """E[1 - p^K - (1-p)^K] under the prior."""
    return prior_as_posterior(prior).expected_signal(k)


def likelihood_range(
    counts: list[tuple[int, int]], fn: Callable[[MixturePrior], float], level: float = 0.95
) -> tuple[float, float]:
    """(min, max) of fn over the priors within chi2_1(level)/2 log-likelihood of the best fit."""
    n = [x[0] for x in counts]
    c = [x[1] for x in counts]
    pairs, weights = grouped_counts(n, c)
    best = fit_prior(n, c)
    point = fn(best)
    if not pairs:
        return 0.0, 1.0  # nothing scored: nothing known
    floor = log_likelihood(best, pairs, weights) - NormalDist().inv_cdf(0.5 + level / 2) ** 2 / 2

    def gap(prior: MixturePrior) -> float:
        return max(0.0, floor - log_likelihood(prior, pairs, weights))

    starts = [
        theta_of(best),
        [-6.0, -6.0, math.log(0.5), math.log(8.0)],  # mostly small pass rates
        [-6.0, -6.0, math.log(8.0), math.log(0.5)],  # mostly large
        [0.0, 0.0, 0.0, 0.0],
    ]
    lo, hi = point, point
    for sign in (1.0, -1.0):
        for start in starts:
            theta = nelder_mead(
                lambda t, sign=sign: (
                    sign * fn(prior_from_theta(t)) + 50.0 * gap(prior_from_theta(t))
                ),
                start,
                step=1.0,
            )
            prior = prior_from_theta(theta)
            if gap(prior) < 1e-3:  # inside the likelihood region (to the optimizer's tolerance)
                lo, hi = min(lo, fn(prior)), max(hi, fn(prior))
    return lo, hi


def useful_prediction(counts: list[tuple[int, int]], k: int, level: float = 0.95) -> dict:
    """Point estimate, interval and basis of the useful fraction at K (direct when every pilot
    task has K rollouts, else extrapolated: estimation/bootstrap.py), and the fitted prior
    (which the adaptive rollout shares use)."""
    prior = fit_prior([x[0] for x in counts], [x[1] for x in counts])
    found = useful_direct(counts, k, level)
    if found is None:
        family = likelihood_range(counts, lambda pr: useful_at(pr, k), level)
        found = useful_extrapolated(counts, k, family, level)
    return {**found, "prior": prior}


def expected_rollouts(
    prior: MixturePrior,
    k: int,
    stop: Callable[[int, np.ndarray], np.ndarray],
    first: int,
    round_size: int = ROUND_SIZE,
) -> float:
    """Expected rollouts per task when a task stops where stop(n, c) says, sampling `first`
    rollouts, then `round_size` at a time, up to k; tasks drawn from the prior."""
    n = min(first, k)
    probs = prior_as_posterior(prior).predictive(n)  # P(c passes in the first n)
    total = 0.0
    while True:
        cs = np.flatnonzero(probs > 1e-15)
        done = stop(n, cs) | (n >= k)
        total += n * float(probs[cs[done]].sum())
        going = cs[~done]
        if not len(going):
            return total
        step = min(round_size, k - n)
        nxt = np.zeros(n + step + 1)
        for c in going:
            nxt[c : c + step + 1] += probs[c] * posterior(prior, n, int(c)).predictive(step)
        probs, n = nxt, n + step


def _settles_on_variance(ex) -> bool:
    """The rules settle a non-0/1 task (keep) once its rewards differ, and leave one whose
    rewards are all equal open until K: true of drop_all_fail / drop_all_pass and min_rollouts
    alone, not of pass-rate bands or signal thresholds (which look at more than the variance)."""
    bands = (ex.min_pass_rate, ex.max_pass_rate, ex.min_grpo_signal)
    return all(x is None for x in bands) and not _posterior_rules(ex)


def _posterior_rules(ex) -> bool:
    return ex.min_expected_signal is not None or ex.min_signal_probability is not None


def variance_rollouts(value_counts: np.ndarray, k: int, first: int, round_size: int) -> float:
    """Expected rollouts per task of a label with non-0/1 rewards under rules that settle a task
    once its rewards differ: first, then round_size at a time while every reward so far is
    equal, up to k. P(the first m rewards are all equal) = sum over reward values v of
    E[q_v^m], q_v a task's chance of reward v; each E[q_v^m] from a grid prior
    (decisions/priors/grid.py) fitted on the per-task counts of v. `value_counts`: [task, value]
    counts of the pilot's scored rollouts."""
    counts = np.asarray(value_counts, dtype=np.int64)
    n = counts.sum(axis=1)
    fits = [fit_grid(n, counts[:, j]).w for j in range(counts.shape[1])]

    def all_equal(m: int) -> float:
        return min(1.0, sum(float(w @ GRID**m) for w in fits))

    done = min(first, k)
    total = float(done)
    while done < k:
        step = min(round_size, k - done)
        total += all_equal(done) * step
        done += step
    return total


def adaptive_rollouts(
    cfg, prior: MixturePrior, k: int, value_counts=None, counts=None
) -> dict[str, float]:
    """Expected share of k rollouts per task under exact and bayes with the config's adaptive
    settings (whichever mode it selects) under its export rules: for 0/1 rewards from the
    prior; for a label with other rewards (`value_counts` given: [task, value] counts) both
    take the exact test (decisions/priors/label.py), from variance_rollouts where the rules
    allow, else every task runs to K. With the pilot's `counts` ((n, c) per task) and no
    posterior rule, bayes is predicted with the rule the run uses: the grid priors fitted on
    them, the label's threshold (decisions/planning/stop_budget.py) and the audit, whose tasks cost
    what exact gives them."""
    ex, group_size, a = cfg.export, cfg.profile.group_size, cfg.adaptive
    if value_counts is not None:
        if not _settles_on_variance(ex):
            return {"bayes": 1.0, "exact": 1.0}
        return {
            "bayes": variance_rollouts(value_counts, k, a.min_rollouts, a.round_size) / k,
            "exact": variance_rollouts(value_counts, k, a.round_size, a.round_size) / k,
        }

    if counts and not _posterior_rules(ex):
        return _as_the_run_stops(cfg, counts, k)

    def exact(n: int, cs: np.ndarray) -> np.ndarray:
        return exact_stop(ex, np.full(len(cs), n), cs, k, group_size)[0]

    def bayes(n: int, cs: np.ndarray) -> np.ndarray:
        return bayes_stop(ex, prior, np.full(len(cs), n), cs, k, group_size, a.delta)[0]

    out = {"bayes": expected_rollouts(prior, k, bayes, a.min_rollouts, a.round_size) / k}
    if not _posterior_rules(ex):
        out["exact"] = expected_rollouts(prior, k, exact, a.round_size, a.round_size) / k
    else:  # exact cannot settle posterior rules: it would run every task to K
        out["exact"] = 1.0
    return out


def _as_the_run_stops(cfg, counts, k: int) -> dict[str, float]:
    ex, a = cfg.export, cfg.adaptive
    n = np.array([x[0] for x in counts], dtype=np.int64)
    c = np.array([x[1] for x in counts], dtype=np.int64)
    labels = np.full(len(n), "pilot", dtype=object)
    cands = fit_label_priors(n, c, labels, {"pilot": True}, min_tasks=0)["pilot"].candidates
    rounds = Rounds(k, a.round_size, a.round_size, a.min_rollouts)
    gs = cfg.profile.group_size
    tau = stop_threshold(ex, cands, rounds, gs, a.delta)
    exact = expected_share(ex, cands, rounds, gs, -1.0)
    bayes = expected_share(ex, cands, rounds, gs, tau)
    return {"exact": exact, "bayes": bayes + a.audit_share * (exact - bayes)}


def value_counts_of(rollouts: pd.DataFrame) -> list[dict[float, int]] | None:
    """Per task, how many scored rollouts got each reward value; None for a label whose
    rewards are all 0 or 1 (its (rollouts, passes) say it all)."""
    scored = rollouts[(rollouts["status"] == "ok") & rollouts["reward"].notna()]
    values = scored["reward"].astype(float).round(9)
    if values.isin([0.0, 1.0]).all():
        return None
    per_task = values.groupby([scored["task_index"], values]).size()
    return [
        {float(v): int(x) for v, x in part.droplevel(0).items()}
        for _, part in per_task.groupby(level=0)
    ]


def group_value_counts(group: list[dict]) -> np.ndarray | None:
    """[task, value] reward-value counts over the pilot labels of a group, None when every
    label's rewards are 0/1."""
    if all(x.get("value_counts") is None for x in group):
        return None
    tasks = []
    for x in group:
        given = x.get("value_counts")
        tasks += given if given is not None else [{0.0: n - c, 1.0: c} for n, c in x["counts"]]
    values = sorted({v for t in tasks for v in t})
    return np.array([[t.get(v, 0) for v in values] for t in tasks], dtype=np.int64)
