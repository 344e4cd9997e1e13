"""Warm start, simulated: bayes on a new checkpoint with the previous checkpoint's profile.

Per task a true pass rate p under the earlier checkpoint (the bench's 50 % p = 0 / 20 % p = 1 /
30 % uniform shape, and Beta(0.5, 0.5)), its earlier profile: K = 16 Bernoulli(p) rollouts;
the new checkpoint's pass rate moves on the logit scale, logit p' = logit p + N(0, s^2) (p = 0
and p = 1 stay), and the new run's rollouts are K = 16 Bernoulli(p') draws (rollout r the same
draw in every mode). Modes, run through the package's planner as a run has them, the audit
sample (3 % of the label) included:

* fixed K = 16 on the new checkpoint: the reference decisions;
* exact (rounds of 2);
* bayes (delta 0.02, the first round exact's rounds up to min_rollouts = 4, 3 or 2) without
  the earlier profile;
* bayes with it (rewardprof.decisions.priors.warm_start: every task matched; the drift fitted on the
  first round), each prior key with its stopping threshold (decisions/planning/stop_budget.py).

Reported: agreement with fixed K, share of fixed-K rollouts used, the fitted drift.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rewardprof.core.config import Export
from rewardprof.decisions.audit.sample import (
    audit_of,
    audit_shares,
    with_audit_cutoffs,
    with_audit_shares,
)
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.stop_budget import with_stop_thresholds
from rewardprof.decisions.planning.stop_tests import keep_at
from rewardprof.decisions.planning.streaks import round_ends, streak_tests
from rewardprof.decisions.priors.label import fit_label_priors
from rewardprof.decisions.priors.warm_start import PriorSet, prior_keys_of, warm_priors

K = 16
FIRSTS = (4, 3, 2)  # adaptive.min_rollouts: the first round
AT_K = AdaptiveSettings("exact", first=K, round_size=2, group_size=8)


def _mix(rng, size):
    u = rng.random(size)
    return np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))


def _edge_heavy(rng, size):
    u = rng.random(size)
    return np.where(u < 0.45, 0.0, np.where(u < 0.60, 1.0, rng.beta(0.3, 0.8, size)))


SHAPES = {
    "50/20/30 mix": _mix,
    "Beta(0.5, 0.5)": lambda rng, size: rng.beta(0.5, 0.5, size),
    "edge-heavy 45/15/40": _edge_heavy,
}
DRIFTS = (0.5, 1.0)


def moved(rng, p: np.ndarray, sd: float) -> np.ndarray:
    """logit p' = logit p + N(0, sd^2); p = 0 and p = 1 stay."""
    with np.errstate(divide="ignore"):
        logit = np.log(p) - np.log1p(-p)
    later = 1.0 / (1.0 + np.exp(-(logit + rng.normal(0.0, sd, len(p)))))
    return np.where((p == 0) | (p == 1), p, later)


def edges_moved(rng, p: np.ndarray, sd: float) -> np.ndarray:
    """moved(), and a tenth of the p = 0 and p = 1 tasks to 0.05 and 0.95."""
    later = moved(rng, p, sd)
    edge = ((p == 0) | (p == 1)) & (rng.random(len(p)) < 0.1)
    return np.where(edge, np.where(p == 0, 0.05, 0.95), later)


def never_solved_wake(rng, p: np.ndarray, sd: float) -> np.ndarray:
    """moved(), and a fifth of the never-solved tasks start to pass rarely (p 0.02-0.05)."""
    later = moved(rng, p, sd)
    wake = (p == 0) & (rng.random(len(p)) < 0.2)
    return np.where(wake, rng.uniform(0.02, 0.05, len(p)), later)


# (earlier shape, how the new checkpoint moved): held out, looked at only after tuning
HELD_OUT = {
    "edge-heavy, a tenth of edge tasks moved to 0.05/0.95": ("edge-heavy 45/15/40", edges_moved),
    "edge-heavy, a fifth of never-solved start to pass": ("edge-heavy 45/15/40", never_solved_wake),
}


def oracle_share(new_p: np.ndarray, rewards: np.ndarray, first: int, delta: float) -> float:
    """The bound: an oracle that knows each task's new pass rate, in the same rounds, stops a
    task once the rules settle it or, from `first` rollouts on, its own P(decision at K
    differs from the most likely one) is at most delta."""
    ex = Export()
    used = 0
    for p, row in zip(new_p, rewards, strict=True):
        n = 2
        while n < K:
            c = int(row[:n].sum())
            keep = keep_at(ex, K, c + np.arange(K - n + 1), 8)
            if keep.all() or not keep.any():
                break
            if n >= first:
                j = np.arange(K - n + 1)
                pmf = (
                    np.exp(
                        [
                            math.lgamma(K - n + 1) - math.lgamma(x + 1) - math.lgamma(K - n - x + 1)
                            for x in j
                        ]
                    )
                    * p**j
                    * (1 - p) ** (K - n - j)
                )
                p_keep = float(pmf[keep].sum())
                if min(p_keep, 1 - p_keep) <= delta:
                    break
            n = min(n + 2, K)
        used += n
    return used / (len(new_p) * K)


def _loop(settings, rewards, labels, priors=None, audited=None, keys=None, start=None):
    k = np.full(len(rewards), K)
    pos, idx = start if start is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    while True:
        rec = Records(pos, idx, rewards[pos, idx])
        out = plan(settings, Export(), k, labels, rec, priors, 1.0, audited, prior_keys=keys)
        a, b = out.missing(rec)
        if not len(a):
            return out, pos, idx
        pos, idx = np.concatenate([pos, a]), np.concatenate([idx, b])


def _finished(priors, settings, ids, labels):
    """The priors as the prior job records them: thresholds per key, the audit's cutoff."""
    keys = prior_keys_of(ids, labels, priors)
    keys = labels if keys is None else keys
    k = np.full(len(ids), K)
    thresholded = with_stop_thresholds(dict(priors), keys, k, labels, settings, Export())
    if isinstance(priors, PriorSet):
        thresholded = PriorSet(thresholded, priors.task_keys)
    return with_audit_cutoffs(thresholded, ids, labels)


def simulate(shape: str, sd: float, tasks: int, seed: int, first: int, later=moved) -> list[dict]:
    rng = np.random.default_rng(seed)
    p = SHAPES[shape](rng, tasks)
    earlier = (rng.random((tasks, K)) < p[:, None]).sum(axis=1)
    new_p = later(rng, p, sd)
    rewards = (rng.random((tasks, K)) < new_p[:, None]).astype(float)
    labels = np.full(tasks, "a", dtype=object)
    ids = np.array([f"task-{i}" for i in range(tasks)], dtype=object)
    every = np.repeat(np.arange(tasks), K), np.tile(np.arange(K), tasks)
    fixed = plan(AT_K, Export(), np.full(tasks, K), labels, Records(*every, rewards[every])).keep
    settings = AdaptiveSettings(
        "bayes", first=2, round_size=2, delta=0.02, group_size=8, bayes_from=first
    )
    exact, _, _ = _loop(replace(settings, mode="exact", bayes_from=0), rewards, labels)
    phase = replace(settings, mode="exact", bayes_from=0, stop_at=first)
    _, pos0, idx0 = _loop(phase, rewards, labels)
    n = np.bincount(pos0, minlength=tasks)
    c = np.bincount(pos0, weights=rewards[pos0, idx0], minlength=tasks).astype(np.int64)
    tests = streak_tests(
        labels[pos0], pos0, idx0, rewards[pos0, idx0] >= 1, round_ends(2, 2, first)
    )
    streaky = {lbl for lbl, t in tests.items() if t.streaky}
    base = fit_label_priors(n, c, labels, {"a": True}, streaky=streaky)
    base = with_audit_shares(base, audit_shares({"a": tasks}), "run")
    earlier_counts = {str(t): (K, int(e)) for t, e in zip(ids, earlier, strict=True)}
    warm, drift = warm_priors(ids, labels, n, c, base, earlier_counts, streaky=streaky)
    rows = [
        {
            "shape": shape,
            "drift_sd": sd,
            "mode": "exact",
            "first": 2,
            "tasks": tasks,
            "agreement": float((exact.keep == fixed).mean()),
            "share_rollouts": float(exact.planned.sum() / (tasks * K)),
            "drift": None,
        }
    ]
    for mode, priors in (("bayes", base), ("bayes + warm start", warm)):
        priors = _finished(priors, settings, ids, labels)
        keys = prior_keys_of(ids, labels, priors)
        audited = audit_of(ids, labels, priors)
        out, _, _ = _loop(settings, rewards, labels, priors, audited, keys, (pos0, idx0))
        rows.append(
            {
                "shape": shape,
                "drift_sd": sd,
                "mode": mode,
                "first": first,
                "tasks": tasks,
                "agreement": float((out.keep == fixed).mean()),
                "share_rollouts": float(out.planned.sum() / (tasks * K)),
                "drift": drift.as_dict() if mode != "bayes" else None,
            }
        )
    rows.append(
        {
            **rows[-1],
            "mode": "oracle (knows the new pass rates)",
            "agreement": None,
            "share_rollouts": oracle_share(new_p, rewards, first, settings.delta),
            "drift": None,
        }
    )
    return rows
