"""Where users start: the scenarios bench_adaptive.py runs bayes on besides its large labels.

Each scenario draws runs of one or more labels; per task a reward path of K = 16 rollouts
(rollout r is the same draw in every mode). bayes runs as the workflow does
(adaptive_runs.bayes_run: exact's rounds up to 4, the LabelPriors fitted on them over all
labels with their thresholds, the audit sample of 3 % never stopped by the prior). Fixed K = 16
decides by the rules on all 16. Reported: agreement with fixed K over all tasks, share of
fixed-K rollouts used, which test each label got, and the audit: its observed flip rate (flips
among audited tasks) with its exact 95 % interval, against the true flip rate of the run (the
share of all tasks the replayed planner, every task unaudited, decides otherwise).

Scenarios: labels of 10, 30 and 100 tasks (the 50 % p=0 / 20 % p=1 / 30 % uniform shape,
many independent runs pooled); one label of two pooled shapes; drift between rounds (every
rollout after the first round has logit p + N(0, 0.5^2), one shift per task); an off-family
label, p in {0, 0.03, 0.6}; partial credit, rewards {0, 0.5, 1} with P(0.5) = 0.2; rollouts
in streaks (within-task Markov correlation 0.3 and 0.7: decisions/planning/streaks.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rewardprof.core.config import Export
from rewardprof.decisions.audit.report import audit_report
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.statistics.binomial import clopper_pearson

try:  # run as a script: benchmarks/ is on sys.path
    import adaptive_runs as runs
except ImportError:  # imported as benchmarks.adaptive_scenarios
    from benchmarks import adaptive_runs as runs

K = 16
SETTINGS = AdaptiveSettings("bayes", first=2, round_size=2, delta=0.02, group_size=8, bayes_from=4)
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


def _markov(rho: float):
    """Rollouts in streaks: per task a Markov chain at its pass rate p (the mix) with lag-1
    correlation rho (P(pass | pass before) = p + rho (1 - p), P(pass | fail) = p (1 - rho))."""

    def draw(rng, size):
        p = _mix(rng, size)
        x = np.zeros((size, K))
        x[:, 0] = rng.random(size) < p
        for t in range(1, K):
            up = np.where(x[:, t - 1] == 1, p + rho * (1 - p), p * (1 - rho))
            x[:, t] = rng.random(size) < up
        return x

    return draw


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
    "rollouts in streaks (Markov, lag-1 correlation 0.3)": (1000, 1, 5, _markov(0.3)),
    "rollouts in streaks (Markov, lag-1 correlation 0.7)": (1000, 1, 5, _markov(0.7)),
}


def run_once(rewards: np.ndarray, labels: np.ndarray, delta: float = SETTINGS.delta) -> dict:
    """One run as the workflow makes it (adaptive_runs.bayes_run) at `delta`; per-task arrays
    and the audit report."""
    tasks = len(rewards)
    k = np.full(tasks, K)
    ids = np.array([f"{lbl}-{i}-{tasks}" for i, lbl in enumerate(labels)], dtype=object)
    out, _, _, audited, priors = runs.bayes_run(rewards, k, labels, Export(), delta, ids=ids)
    audited = np.zeros(tasks, bool) if audited is None else audited
    every = np.repeat(np.arange(tasks), K), np.tile(np.arange(K), tasks)
    full = Records(*every, rewards[every])
    fixed = plan(AT_K, Export(), k, labels, full, None).keep
    settings = replace(SETTINGS, delta=delta)
    replay = plan(settings, Export(), k, labels, full, priors)  # every task, as if unaudited
    report = audit_report(labels, audited, replay.stopped_early, replay.keep, fixed, delta)
    return {
        "agree": out.keep == fixed,
        "used": out.planned,
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
    flipped = sum(int(r["true_flipped"].sum()) for r in parts)
    a_tasks = sum(r["audit"]["audited_tasks"] for r in parts)
    a_flip = sum(r["audit"]["flipped"] for r in parts)
    lo, hi = clopper_pearson(a_flip, a_tasks)
    true_rate = flipped / len(agree)  # the share of tasks decided otherwise: what delta bounds
    return {
        "scenario": name,
        "tasks": len(agree),
        "modes": "/".join(sorted(set().union(*(r["modes"] for r in parts)))),
        "agreement": float(agree.mean()),
        "share_rollouts": float(used.sum() / (len(used) * K)),
        "audited": sum(r["audit"]["audited_tasks"] for r in parts),
        "audit_flip": (a_flip, a_tasks),
        "audit_interval": (lo, hi),
        "true_flip_rate": true_rate,
        "true_in_interval": bool(lo <= true_rate <= hi) if a_tasks else None,
    }
