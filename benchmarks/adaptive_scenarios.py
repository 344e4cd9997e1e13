"""Where users start: the scenarios bench_adaptive.py runs bayes on besides its large labels.

Each scenario draws runs of one or more labels; per task a reward path of K = 16 rollouts
(rollout r is the same draw in every mode). bayes runs the rollout stage's loop: a first round
of 4 per task, the LabelPriors fitted on it over all labels (rewardprof.decisions.label_prior,
with 0/1 judged per label from the first round's rewards), the audit sample (3 %, at least 30
tasks per label) always to K, rounds of 2 until each task's decision at 16 is settled. Fixed
K = 16 decides by the rules on all 16. Reported: agreement with fixed K over all tasks, share
of fixed-K rollouts used, which test each label got, and the audit: its observed flip rate
(flips among audited tasks the replayed planner would have stopped early) with its exact 95 %
interval, against the true flip rate of the run (the same replay on every task's full path).

Scenarios: labels of 10, 30 and 100 tasks (the 50 % p=0 / 20 % p=1 / 30 % uniform shape,
many independent runs pooled); one label of two pooled shapes; drift between rounds (every
rollout after the first round has logit p + N(0, 0.5^2), one shift per task); an off-family
label, p in {0, 0.03, 0.6}; partial credit, rewards {0, 0.5, 1} with P(0.5) = 0.2.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rewardprof.core.config import Export
from rewardprof.decisions.adaptive_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.audit import (
    audit_of,
    audit_report,
    audit_shares,
    clopper_pearson,
    with_audit_shares,
)
from rewardprof.decisions.label_prior import fit_label_priors

K = 16
SETTINGS = AdaptiveSettings("bayes", first=4, round_size=2, delta=0.02, group_size=8)
AT_K = AdaptiveSettings("exact", first=K, round_size=2, group_size=8)


def _mix(rng, size):
    u = rng.random(size)
    return np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))


def _paths(rng, p):
    return (rng.random((len(p), K)) < p[:, None]).astype(float)


def _two_shapes(rng, size):
    hard = np.where(rng.random(size) < 0.5, 0.0, rng.beta(0.3, 6.0, size))
    easy = np.where(rng.random(size) < 0.5, 1.0, rng.beta(6.0, 0.3, size))
    return np.where(rng.random(size) < 0.5, hard, easy)


def _drift(rng, size):
    p = _mix(rng, size)
    logit = np.log(np.clip(p, 1e-9, 1 - 1e-9) / np.clip(1 - p, 1e-9, 1))
    later = 1 / (1 + np.exp(-(logit + rng.normal(0, 0.5, size))))
    later = np.where((p == 0) | (p == 1), p, later)  # never/always stays so
    first, rest = _paths(rng, p), _paths(rng, later)
    return np.concatenate([first[:, :4], rest[:, 4:]], axis=1)


def _partial(rng, size):
    p = _mix(rng, size)
    rewards = _paths(rng, p)
    return np.where(rng.random(rewards.shape) < 0.2, 0.5, rewards)


# name -> (tasks per label, labels per run, runs, reward paths of `size` tasks)
SCENARIOS = {
    "10-task labels": (10, 1, 60, lambda rng, n: _paths(rng, _mix(rng, n))),
    "30-task labels": (30, 1, 25, lambda rng, n: _paths(rng, _mix(rng, n))),
    "100-task labels": (100, 1, 8, lambda rng, n: _paths(rng, _mix(rng, n))),
    "two shapes pooled in one label": (1500, 1, 1, lambda rng, n: _paths(rng, _two_shapes(rng, n))),
    "drift between rounds (N(0, 0.5^2))": (1500, 1, 1, _drift),
    "off-family p in {0, 0.03, 0.6}": (
        1500,
        1,
        1,
        lambda rng, n: _paths(rng, rng.choice([0.0, 0.03, 0.6], n)),
    ),
    "partial credit {0, 0.5, 1}, P(0.5)=0.2": (1500, 1, 1, _partial),
}


def _loop(rewards, labels, priors, audited, settings):
    tasks = len(rewards)
    k = np.full(tasks, K)
    pos = idx = np.zeros(0, np.int64)
    while True:
        rec = Records(pos, idx, rewards[pos, idx])
        out = plan(settings, Export(), k, labels, rec, priors, 1.0, audited)
        if out.done.all():
            return out, rec
        a, b = out.missing(rec)
        pos, idx = np.concatenate([pos, a]), np.concatenate([idx, b])


def run_once(rewards: np.ndarray, labels: np.ndarray, delta: float = SETTINGS.delta) -> dict:
    """One run through the planner at `delta`; per-task arrays and the audit report."""
    settings = replace(SETTINGS, delta=delta)
    tasks = len(rewards)
    first = rewards[:, :4]
    binary = {
        lbl: bool(np.isin(first[labels == lbl], [0.0, 1.0]).all()) for lbl in np.unique(labels)
    }
    priors = fit_label_priors(np.full(tasks, 4), (first >= 1.0).sum(axis=1), labels, binary)
    shares = audit_shares({lbl: int((labels == lbl).sum()) for lbl in priors})
    priors = with_audit_shares(priors, shares)
    ids = np.array([f"{lbl}-{i}-{tasks}" for i, lbl in enumerate(labels)], dtype=object)
    audited = audit_of(ids, labels, priors)
    audited = np.zeros(tasks, bool) if audited is None else audited
    out, rec = _loop(rewards, labels, priors, audited, settings)
    every = np.repeat(np.arange(tasks), K), np.tile(np.arange(K), tasks)
    full = Records(*every, rewards[every])
    k = np.full(tasks, K)
    fixed = plan(AT_K, Export(), k, labels, full, None).keep
    replay = plan(settings, Export(), k, labels, full, priors)  # every task, as if unaudited
    report = audit_report(labels, audited, replay.stopped_early, replay.keep, fixed, delta)
    return {
        "agree": out.keep == fixed,
        "used": out.planned,
        "true_stopped": replay.stopped_early,
        "true_flipped": replay.stopped_early & (replay.keep != fixed),
        "audit": report["overall"],
        "modes": {p.stop_mode for p in priors.values()},
    }


def simulate(name: str, seed: int, delta: float = SETTINGS.delta) -> dict:
    size, _, runs, draw = SCENARIOS[name]
    rng = np.random.default_rng(seed)
    label = np.full(size, "a", dtype=object)
    parts = [run_once(draw(rng, size), label, delta) for _ in range(runs)]
    agree = np.concatenate([r["agree"] for r in parts])
    used = np.concatenate([r["used"] for r in parts])
    stopped = sum(int(r["true_stopped"].sum()) for r in parts)
    flipped = sum(int(r["true_flipped"].sum()) for r in parts)
    a_stop = sum(r["audit"]["would_stop_early"] for r in parts)
    a_flip = sum(r["audit"]["flipped"] for r in parts)
    lo, hi = clopper_pearson(a_flip, a_stop)
    true_rate = flipped / stopped if stopped else 0.0
    return {
        "scenario": name,
        "tasks": len(agree),
        "modes": "/".join(sorted(set().union(*(r["modes"] for r in parts)))),
        "agreement": float(agree.mean()),
        "share_rollouts": float(used.sum() / (len(used) * K)),
        "audited": sum(r["audit"]["audited_tasks"] for r in parts),
        "audit_flip": (a_flip, a_stop),
        "audit_interval": (lo, hi),
        "true_flip_rate": true_rate,
        "true_in_interval": bool(lo <= true_rate <= hi) if a_stop else None,
    }
