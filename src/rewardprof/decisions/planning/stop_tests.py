"""Adaptive stopping: when a task's keep/drop decision at num_repeats (K) is settled early.

Two tests, both on a task's c passes in its first n rollouts (rollouts are sampled in index
order, so the first n of an adaptive run are the first n of a fixed-K run):

* `exact`: stop when every way the remaining K - n rollouts could turn out gives the same
  decision under the export keep rules (`keep_rules.decision_range`). The decision is then the
  fixed-K decision by construction, whatever the rollouts would have returned. Under the default
  rules (drop all-fail and all-pass) one pass and one fail settle "keep"; an all-fail task runs
  to K.
* `bayes`: stop when the posterior probability that the decision at K differs from the most
  likely one is below delta. The remaining passes are predicted from the task's posterior under
  its label's prior (`posterior.Posterior.predictive`: beta-binomial plus the point masses), so
  P(keep at K) = sum_j P(j more passes) * keep(K, c + j). The decision recorded for a stopped
  task is the most likely decision at K; on average at most a delta share of stopped tasks
  differs from fixed K. The prior must be a deterministic function of the run (fitted on a
  first round of min_rollouts per task over all tasks, and recorded): fitted per shard or on
  whatever was journaled at a restart, decisions would depend on the layout and on timing.

Both are pure: the caller supplies (n, c) per task and gets (stop, keep) back. The rules and
config objects are duck-typed (`ex`: the export config; see `keep_rules.drop_reasons`). Only
tasks whose rewards are 0/1 have a predictive distribution; for other tasks `bayes` falls back
to the `exact` test.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rewardprof.decisions.keep_rules import KEEP, OpenTasks, decision_range, drop_reasons
from rewardprof.decisions.priors.posterior import MixturePrior, posterior, posterior_columns

MODES = ("off", "exact", "bayes")
DEFAULT_DELTA = 0.02
DEFAULT_MIN_ROLLOUTS = 4
# exact needs no first round (no prior): two rollouts can already settle "keep"
EXACT_FIRST_ROUND = 2


def posterior_fn_for(
    prior: MixturePrior, *, level: float, group_size: int, signal_threshold: float
) -> Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]:
    """posterior_columns(prior, n, c) with the profile's settings bound (for completions)."""

    def fn(n: np.ndarray, c: np.ndarray) -> dict[str, np.ndarray]:
        return posterior_columns(
            prior, n, c, level=level, group_size=group_size, min_signal=signal_threshold
        )

    return fn


def binary_state_columns(
    n: np.ndarray, c: np.ndarray, group_size: int, label: str = ""
) -> dict[str, np.ndarray]:
    """The keep rules' columns of tasks with 0/1 rewards, c passes in n."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n > 0, c / np.maximum(n, 1), np.nan)
    return {
        "num_rollouts": n,
        "pass_rate": rate,
        "has_variance": (c > 0) & (c < n),
        "grpo_signal": 1.0 - rate**group_size - (1.0 - rate) ** group_size,
        "label": np.full(len(n), label, dtype=object),
    }


def exact_stop(
    ex, n, c, num_repeats: int, group_size: int, label: str = "", posterior_fn=None
) -> tuple[np.ndarray, np.ndarray]:
    """(stop, keep) for 0/1-reward tasks: stop when the decision at num_repeats is the same for
    every outcome of the remaining rollouts; keep is that decision (meaningful where stop)."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    cols = binary_state_columns(n, c, group_size, label)
    if posterior_fn is not None:
        cols.update(posterior_fn(n, c))
    open_tasks = OpenTasks(cols, c, num_repeats - n, np.ones(len(n), bool))
    can_keep, can_drop = decision_range(ex, open_tasks, group_size, posterior_fn)
    return can_keep != can_drop, can_keep & ~can_drop


def keep_at(ex, num_repeats: int, c, group_size: int, label: str = "", posterior_fn=None):
    """The keep rules' decision for 0/1-reward tasks with c passes in num_repeats rollouts."""
    c = np.asarray(c, dtype=np.int64)
    n = np.full(len(c), num_repeats, dtype=np.int64)
    cols = binary_state_columns(n, c, group_size, label)
    if posterior_fn is not None:
        cols.update(posterior_fn(n, c))
    return drop_reasons(ex, cols) == KEEP


def flip_probability(
    ex,
    prior: MixturePrior,
    n: int,
    c: int,
    num_repeats: int,
    group_size: int,
    label: str = "",
    posterior_fn=None,
) -> tuple[float, bool]:
    """(P(decision at num_repeats differs from the most likely one), that most likely decision
    is keep) for one 0/1-reward task with c passes in n rollouts."""
    remaining = num_repeats - n
    if remaining <= 0:
        keep = bool(keep_at(ex, num_repeats, [c], group_size, label, posterior_fn)[0])
        return 0.0, keep
    pmf = posterior(prior, n, c).predictive(remaining)
    keep = keep_at(ex, num_repeats, c + np.arange(remaining + 1), group_size, label, posterior_fn)
    p_keep = float(np.sum(pmf[keep]))
    return min(p_keep, 1.0 - p_keep), p_keep >= 0.5


def bayes_stop(
    ex,
    prior: MixturePrior,
    n,
    c,
    num_repeats: int,
    group_size: int,
    delta: float = DEFAULT_DELTA,
    label: str = "",
    posterior_fn=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stop, keep, p_flip) per 0/1-reward task: stop where p_flip < delta (or n == K); keep is
    the most likely decision at num_repeats. Computed once per distinct (n, c)."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if not len(n):
        return np.zeros(0, bool), np.zeros(0, bool), np.zeros(0)
    keys, inverse = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    rows = [
        flip_probability(ex, prior, int(a), int(b), num_repeats, group_size, label, posterior_fn)
        for a, b in keys
    ]
    p_flip = np.array([r[0] for r in rows])[inverse.reshape(-1)]
    keep = np.array([r[1] for r in rows], dtype=bool)[inverse.reshape(-1)]
    stop = (p_flip < delta) | (n >= num_repeats)
    return stop, keep, p_flip
