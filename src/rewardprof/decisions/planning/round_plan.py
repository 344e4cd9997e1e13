"""The round plan of adaptive sampling: which rollouts each task needs, replayed from its results.

`plan` is a pure function of (settings, keep rules, each task's num_repeats K and label, the
labels' priors, the known rollout results). It replays the rounds from the start: a task first
needs rollouts 0..first-1; once all of them are known (ok or failed) the stopping test
(decisions/planning/stop_tests.py) runs on them, and if the decision at K is not settled the
task needs `round_size` more, up to K. A round looks only at the rollouts below its size, in index
order, so the plan does not depend on the order results arrived in, on how tasks are split into
shards, on concurrency, or on rollouts journaled beyond it (a run killed mid-round replans the same
rounds from its journal). The rollout stage asks it what to sample next; the stages after it
can ask it which rollouts a complete task has and what was decided.

A failed rollout in a task's prefix is known (it is not sampled again in that run) but gives no
reward: the test treats it like a rollout still to come (K - ok rollouts are unknown).

Whether rewards are 0/1 is a property of the label, never of one task's prefix: a label is 0/1
when its LabelPrior says so (bayes: every first-round reward of the label was 0 or 1), else
when every reward of its first round (rollouts below `first`) is 0 or 1. That is settled once
the first round of every task of the label is known (or one reward of it is not 0 or 1): until
then no task of the label is tested, so a rerun that finds part of a first round journaled
makes the decisions an undisturbed run makes. Settled, it is fixed, so each task's plan is a
function of its own results (task_rounds.py plans task by task on it). A partial-credit
label's tasks get the exact test even where their own first rewards are all 0. `audit`: tasks
that always run to K (decisions/audit/sample.py): the run's own check of what stopping early costs.
A task at K is decided by the rules on its rollouts (undecided ones per on_undecided), the same
decision the export makes; only tasks below K get the bayes prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from rewardprof.decisions.keep_rules import OpenTasks, decision_range
from rewardprof.decisions.planning.robust_stop import robust_bayes_stop
from rewardprof.decisions.planning.stop_tests import DEFAULT_DELTA, posterior_fn_for
from rewardprof.decisions.priors.label import LabelPrior


@dataclass(frozen=True)
class AdaptiveSettings:
    """mode exact | bayes; `first`: the first round per task; then `round_size` at a time.
    `bayes_from`: bayes tests a task by its label's prior only from this many rollouts on
    (adaptive.min_rollouts; below it, the exact test alone, so bayes settles every task exact
    settles, at the same point); `stop_at`: a phase that grows no task past this many rollouts
    (bayes' first round: exact's rounds up to min_rollouts, what the prior is fitted on)."""

    mode: str
    first: int
    round_size: int = 2
    delta: float = DEFAULT_DELTA
    group_size: int = 8
    ci_level: float = 0.95
    signal_threshold: float = 0.1
    bayes_from: int = 0
    stop_at: int | None = None


@dataclass(frozen=True)
class Records:
    """Known rollout results, one per (task, rollout_index) (the journal's winners): task
    position (0..T-1), rollout_index, reward (NaN: failed)."""

    pos: np.ndarray
    rollout_index: np.ndarray
    reward: np.ndarray


@dataclass
class Plan:
    """Per task: rollouts 0..planned-1 are needed; `done`: the decision is settled (or K is
    reached) on them; `keep`: that decision (the most likely one at K under bayes)."""

    planned: np.ndarray
    done: np.ndarray
    stopped_early: np.ndarray
    keep: np.ndarray

    def missing(self, records: Records) -> tuple[np.ndarray, np.ndarray]:
        """(task position, rollout index) of the planned rollouts not among `records`: what to
        sample next, in task then index order."""
        # one key per (task, index); wide enough for records past the plan too
        width = max(int(self.planned.max(initial=0)), int(records.rollout_index.max(initial=0))) + 1
        owner = np.repeat(np.arange(len(self.planned)), self.planned)
        first = np.cumsum(self.planned) - self.planned
        idx = np.arange(len(owner)) - first[owner]
        have = np.isin(owner * width + idx, records.pos * width + records.rollout_index)
        return owner[~have], idx[~have]


def uses_posterior(ex) -> bool:
    return ex.min_expected_signal is not None or ex.min_signal_probability is not None


def _prefix_stats(records: Records, n_t: np.ndarray, pass_threshold: float):
    """Over each task's records below its round size: (complete prefix, ok, passes, distinct
    rewards, all rewards 0/1)."""
    size = len(n_t)
    below = records.rollout_index < n_t[records.pos]
    pos, reward = records.pos[below], records.reward[below]
    present = np.bincount(pos, minlength=size)  # one record per (task, index): see Records
    ok = ~np.isnan(reward)
    n_ok = np.bincount(pos[ok], minlength=size)
    passes = np.bincount(pos[ok & (reward >= pass_threshold)], minlength=size)
    values = pd.DataFrame({"pos": pos[ok], "v": np.round(reward[ok], 9)})
    distinct = values.groupby("pos")["v"].nunique().reindex(range(size), fill_value=0).to_numpy()
    non_binary = np.bincount(pos[ok & ~np.isin(reward, [0.0, 1.0])], minlength=size)
    return present >= n_t, n_ok, passes, distinct, non_binary == 0


def label_binary(
    records: Records,
    labels: np.ndarray,
    num_repeats: np.ndarray,
    first: int,
    priors: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per task: (its label's rewards are 0/1, that is settled) (see the module doc)."""
    labels = np.asarray(labels, dtype=object)
    first_round = records.rollout_index < first
    pos, reward = records.pos[first_round], records.reward[first_round]
    odd = ~np.isnan(reward) & ~np.isin(reward, [0.0, 1.0])
    odd_labels = set(pd.unique(labels[pos[odd]]).tolist())
    n_first = np.minimum(first, np.asarray(num_repeats, dtype=np.int64))
    whole = np.bincount(pos, minlength=len(labels)) >= n_first  # one record per (task, index)
    binary = np.ones(len(labels), dtype=bool)
    settled = np.ones(len(labels), dtype=bool)
    for label in pd.unique(labels):
        of = labels == label
        prior = (priors or {}).get(label)
        if isinstance(prior, LabelPrior):
            binary[of] = prior.binary
        else:
            binary[of] = label not in odd_labels
            settled[of] = label in odd_labels or bool(whole[of].all())
    return binary, settled


def plan(
    settings: AdaptiveSettings,
    ex,
    num_repeats: np.ndarray,
    labels: np.ndarray,
    records: Records,
    priors: dict[str, LabelPrior] | None = None,
    pass_threshold: float = 1.0,
    audit: np.ndarray | None = None,
    binary: np.ndarray | None = None,
    prior_keys: np.ndarray | None = None,
) -> Plan:
    """The plan for every task given the known results (see the module doc). `ex`: the export
    config (keep rules); `priors`: label -> LabelPrior (adaptive/prior.json's `label_priors`),
    needed by bayes and by posterior rules; `audit`: per task, never
    stopped early; `binary`: per task, its label's settled 0/1 flag (label_binary), for a plan
    of some tasks of a label alone (else derived from `records`); `prior_keys`: per task, the
    key of its prior in `priors` (default its label; a warm-started task's own key:
    decisions/priors/warm_start.py)."""
    _check_inputs(settings, ex, labels, priors)
    k = np.asarray(num_repeats, dtype=np.int64)
    labels = np.asarray(labels, dtype=object)
    keys = labels if prior_keys is None else np.asarray(prior_keys, dtype=object)
    limit = k if settings.stop_at is None else np.minimum(k, settings.stop_at)
    n_t = np.minimum(settings.first, limit)
    done = np.zeros(len(k), dtype=bool)
    keep = np.zeros(len(k), dtype=bool)
    waiting = np.zeros(len(k), dtype=bool)
    if binary is None:
        of_binary_label, label_settled = label_binary(records, labels, k, settings.first, priors)
    else:
        of_binary_label, label_settled = np.asarray(binary, bool), np.ones(len(k), bool)
    audited = np.zeros(len(k), bool) if audit is None else np.asarray(audit, dtype=bool)
    while True:
        open_ = ~done & ~waiting
        if not open_.any():
            break
        complete, n_ok, passes, distinct, zero_one = _prefix_stats(records, n_t, pass_threshold)
        zero_one &= of_binary_label
        ready = complete & label_settled
        waiting |= open_ & ~ready
        test = open_ & ready
        # bayes' prior speaks only from bayes_from rollouts on
        state = (n_ok, passes, distinct, zero_one, n_t >= np.minimum(settings.bayes_from, k))
        finished, kept = _decided(
            settings, ex, (k, n_t), (labels, keys), priors, state, test, audited
        )
        done |= finished
        keep[finished] = kept[finished]
        grow = test & ~finished
        waiting |= grow & (n_t >= limit)  # the end of a phase (stop_at), not a decision
        grow &= n_t < limit
        n_t = np.where(grow, np.minimum(n_t + settings.round_size, limit), n_t)
    return Plan(n_t, done, done & (n_t < k), keep)


def _check_inputs(settings: AdaptiveSettings, ex, labels: np.ndarray, priors) -> None:
    """ValueError for a plan that cannot be made: an unknown mode, exact with posterior keep
    rules, a label without a prior where one is needed."""
    if settings.mode not in ("exact", "bayes"):
        raise ValueError(f"adaptive mode {settings.mode!r}: exact or bayes")
    if settings.mode == "exact" and uses_posterior(ex):
        raise ValueError(
            "adaptive mode exact cannot settle posterior keep rules (min_expected_signal, "
            "min_signal_probability): their prior depends on rollouts not yet sampled; use bayes"
        )
    if settings.mode == "bayes" or uses_posterior(ex):
        for label in pd.unique(np.asarray(labels, dtype=object)):
            if label not in (priors or {}):
                raise ValueError(f"adaptive: no prior for label {label!r}")
    for key, prior in (priors or {}).items():
        if not isinstance(prior, LabelPrior):
            raise TypeError(
                f"adaptive: the prior of {key!r} is a {type(prior).__name__}, not a LabelPrior"
            )


def _decided(settings, ex, k_n, labels_keys, priors, state, test, audited):
    """(finished, keep) this round for the tasks in `test`; `k_n`: per task (K, its round
    size); `state`: (ok rollouts, passes, distinct rewards, 0/1 rewards, eligible for the
    prior's test)."""
    k, n_t = k_n
    at_k = n_t >= k
    settled, kept, by_prior = _settled(settings, ex, k, labels_keys, priors, *state, test & ~at_k)
    # at K: the rules' decision on what the task has (as the export decides it)
    exact = replace(settings, mode="exact")
    _, kept_at_k, _ = _settled(exact, ex, k, labels_keys, priors, *state, test & at_k)
    # at K, too few scored rollouts: the export's no_rollouts drop
    kept_at_k &= state[0] >= ex.min_rollouts
    kept = np.where(at_k, kept_at_k, kept)
    # audited: never stopped by the prior (a task the rules settle cannot flip: it stops)
    settled &= ~(audited & by_prior)
    return test & (settled | at_k), kept


def _settled(settings, ex, k, labels_keys, priors, n_ok, passes, distinct, binary, eligible, test):
    """(settled, keep, settled by the prior alone) for the tasks in `test` (other entries are
    False), computed once per distinct state (prior key, K, ok rollouts, passes, variance, 0/1
    rewards, eligible for the prior's test); `labels_keys`: per task its label and the key of
    its prior (a key belongs to one label)."""
    labels, keys = labels_keys
    settled = np.zeros(len(k), dtype=bool)
    keep = np.zeros(len(k), dtype=bool)
    by_prior = np.zeros(len(k), dtype=bool)
    rows = np.flatnonzero(test)
    if not len(rows):
        return settled, keep, by_prior
    label_code = pd.factorize(keys[rows])[0].astype(np.int64)
    width = int(k.max()) + 1
    key = label_code
    for part in (k[rows], n_ok[rows], passes[rows]):
        key = key * width + part
    key = ((key * 2 + (distinct[rows] > 1)) * 2 + binary[rows]) * 2 + eligible[rows]
    _, first, codes = np.unique(key, return_index=True, return_inverse=True)
    codes = codes.reshape(-1)
    reps = rows[first]  # one task per distinct state
    state = (n_ok, passes, distinct, binary, eligible)
    s_rep, k_rep, p_rep = _settled_states(settings, ex, k, labels_keys, priors, state, reps)
    settled[rows], keep[rows], by_prior[rows] = s_rep[codes], k_rep[codes], p_rep[codes]
    return settled, keep, by_prior


def _settled_states(settings, ex, k, labels_keys, priors, state, reps):
    """(settled, keep, settled by the prior alone) per representative task (arrays aligned
    with reps); `state`: per task (ok rollouts, passes, distinct rewards, 0/1 rewards,
    eligible for the prior's test)."""
    labels, keys = labels_keys
    n_ok, passes, distinct, binary, eligible = state
    settled = np.zeros(len(reps), dtype=bool)
    keep = np.zeros(len(reps), dtype=bool)
    by_prior = np.zeros(len(reps), dtype=bool)
    for key in pd.unique(keys[reps]):
        at = np.flatnonzero(keys[reps] == key)
        rows = reps[at]
        label = labels[rows[0]]
        prior = (priors or {}).get(key)
        if (settings.mode == "bayes" or uses_posterior(ex)) and prior is None:
            raise ValueError(f"adaptive: no prior for label {key!r}")
        post_fn = _posterior_fn(settings, ex, prior)
        n, c = n_ok[rows], passes[rows]
        cols = _open_columns(settings, n, c, distinct[rows] > 1, label, post_fn)
        unknown = k[rows] - n
        can_keep, can_drop = decision_range(
            ex, OpenTasks(cols, c, unknown, binary[rows]), settings.group_size, post_fn
        )
        exact = can_keep != can_drop
        if ex.min_grpo_signal is not None:
            # partial credit: the export reads GRPO signal from the reward values, which a
            # value not seen yet can move either way (the states above carry a pass-rate
            # signal): such a task is decided at K, as fixed K decides it
            exact &= binary[rows] | (unknown <= 0)
        settled[at] = exact
        # a task at K whose failures leave it undecided keeps per on_undecided
        keep[at] = np.where(exact, can_keep, ex.on_undecided == "keep")
        if settings.mode == "bayes" and prior.stop_mode == "bayes":
            by_k = np.flatnonzero(binary[rows] & eligible[rows] & ~exact)
            found = (settled, keep, by_prior)
            _bayes_stops(
                settings, ex, (prior, label, post_fn), (k[rows], n, c, exact), at, by_k, found
            )
        # the export drops a task with fewer than min_rollouts scored rollouts whatever they
        # say, and any rollout still to come may fail: a keep is settled only on enough of them
        settled[at] &= ~(keep[at] & (n < ex.min_rollouts))
        by_prior[at] &= settled[at]
    return settled, keep, by_prior


def _posterior_fn(settings, ex, prior):
    """The posterior columns' function of the posterior keep rules (None without them)."""
    if not uses_posterior(ex):
        return None
    return posterior_fn_for(
        prior.mixture,
        level=settings.ci_level,
        group_size=settings.group_size,
        signal_threshold=settings.signal_threshold,
    )


def _open_columns(settings, n, c, has_variance, label, post_fn) -> dict:
    """The per-task columns the keep rules read, on the rollouts known so far."""
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n > 0, c / np.maximum(n, 1), np.nan)
    cols = {
        "num_rollouts": n,
        "pass_rate": rate,
        "has_variance": has_variance,
        "grpo_signal": 1.0 - rate**settings.group_size - (1.0 - rate) ** settings.group_size,
        "label": np.full(len(n), label, dtype=object),
    }
    if post_fn is not None:
        cols.update(post_fn(n, c))
    return cols


def _bayes_stops(settings, ex, prior_of, counts, at, by_k, found) -> None:
    """The bayes test on the tasks `by_k` of one prior key (positions in `at`), per K: marks
    `found` (settled, keep, by_prior) in place; `prior_of`: (prior, label, posterior fn);
    `counts`: per task of the key (K, ok rollouts, passes, settled by the rules)."""
    prior, label, post_fn = prior_of
    k, n, c, exact = counts
    settled, keep, by_prior = found
    for kk in np.unique(k[by_k]):
        sel = by_k[k[by_k] == kk]
        stop, kept, _ = robust_bayes_stop(
            ex, prior, n[sel], c[sel], int(kk), settings.group_size, settings.delta, label, post_fn
        )
        settled[at[sel]] = stop | exact[sel]
        by_prior[at[sel]] = stop & ~exact[sel]
        keep[at[sel]] = np.where(stop, kept, keep[at[sel]])
