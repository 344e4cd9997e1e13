"""The round planner: fixed-K decisions under exact, and a plan that depends on the rewards
alone (not on arrival order, shard split, rollouts past the plan, or where a run was killed)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from rewardprof.core.config import ConfigError, Export
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.stop_tests import keep_at
from rewardprof.decisions.priors.label import fit_label_priors
from rewardprof.manifest.load import validate_config

K = 16
EXACT = AdaptiveSettings("exact", first=2, round_size=2)
BAYES = AdaptiveSettings("bayes", first=4, round_size=2, delta=0.05)
# label a's LabelPrior, fitted on a first round of 4 rollouts over 40 tasks
PRIORS = fit_label_priors(np.full(40, 4), np.arange(40) % 5, np.full(40, "a"), {"a": True})


def _paths(seed: int, tasks: int = 600) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u = rng.random(tasks)
    p = np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(tasks)))
    return (rng.random((tasks, K)) < p[:, None]).astype(float)


def _run(settings, rewards: np.ndarray, start: Records | None = None, ex=None) -> tuple:
    """The rollout loop: plan, sample what is missing (reveal it from `rewards`), repeat."""
    tasks = len(rewards)
    pos = start.pos if start else np.zeros(0, np.int64)
    idx = start.rollout_index if start else np.zeros(0, np.int64)
    k, labels = np.full(tasks, K), np.full(tasks, "a", dtype=object)
    while True:
        records = Records(pos, idx, rewards[pos, idx])
        p = plan(settings, ex or Export(), k, labels, records, PRIORS)
        if p.done.all():
            return p, records
        new_pos, new_idx = p.missing(records)
        assert len(new_pos), "a plan that is not done must ask for rollouts"
        pos, idx = np.concatenate([pos, new_pos]), np.concatenate([idx, new_idx])


def test_exact_plan_decides_as_fixed_k_with_fewer_rollouts():
    rewards = _paths(1)
    p, records = _run(EXACT, rewards)
    fixed = keep_at(Export(), K, rewards.sum(axis=1).astype(int), 8)
    assert (p.keep == fixed).all()
    assert len(records.pos) == p.planned.sum() < rewards.size * 0.9
    # the band rules too
    band = Export(min_pass_rate=0.2, max_pass_rate=0.8)
    p, _ = _run(EXACT, rewards, ex=band)
    assert (p.keep == keep_at(band, K, rewards.sum(axis=1).astype(int), 8)).all()


@pytest.mark.parametrize("settings", [EXACT, BAYES], ids=["exact", "bayes"])
def test_plan_depends_on_the_rewards_alone(settings):
    rewards = _paths(2)
    final, records = _run(settings, rewards)
    rng = np.random.default_rng(3)
    k, labels = np.full(len(rewards), K), np.full(len(rewards), "a", dtype=object)

    def replan(r: Records):
        return plan(settings, Export(), k, labels, r, PRIORS)

    # arrival order
    order = rng.permutation(len(records.pos))
    shuffled = Records(records.pos[order], records.rollout_index[order], records.reward[order])
    again = replan(shuffled)
    assert (again.planned == final.planned).all() and (again.keep == final.keep).all()
    # every rollout journaled (e.g. by a fixed-K run): the plan ignores those past it
    every = np.repeat(np.arange(len(rewards)), K), np.tile(np.arange(K), len(rewards))
    full = replan(Records(*every, rewards[every]))
    assert (full.planned == final.planned).all() and (full.keep == final.keep).all()
    # a shard of the tasks plans its tasks as the whole run does
    shard = np.arange(len(rewards)) % 3 == 1
    local = np.cumsum(shard) - 1
    mine = shard[records.pos]
    part = plan(
        settings,
        Export(),
        k[shard],
        labels[shard],
        Records(local[records.pos[mine]], records.rollout_index[mine], records.reward[mine]),
        PRIORS,
    )
    assert (part.planned == final.planned[shard]).all() and (part.keep == final.keep[shard]).all()
    # killed mid-run with a random part of the rollouts journaled: the rerun ends the same
    kept = rng.random(len(records.pos)) < 0.4
    killed = Records(records.pos[kept], records.rollout_index[kept], records.reward[kept])
    resumed, resumed_records = _run(settings, rewards, start=killed)
    assert (resumed.planned == final.planned).all() and (resumed.keep == final.keep).all()
    assert len(resumed_records.pos) == len(records.pos)


def test_failed_rollouts_are_unknown_not_zero():
    nan = np.nan
    k, labels = np.array([2, 4, 4]), np.array(["a"] * 3, dtype=object)
    # task 0: a failure and a pass at K = 2: undecided -> kept (on_undecided: keep), done
    # task 1: a fail (reward 0), a failure, then a pass: one pass and one fail settle keep
    # task 2: two failures in the first round: nothing known, so the next round is needed
    pos = np.array([0, 0, 1, 1, 1, 1, 2, 2])
    idx = np.array([0, 1, 0, 1, 2, 3, 0, 1])
    reward = np.array([nan, 1.0, 0.0, nan, 1.0, 1.0, nan, nan])
    one = Export(min_rollouts=1)
    p = plan(EXACT, one, k, labels, Records(pos, idx, reward))
    assert p.done.tolist() == [True, True, False]
    assert p.keep[:2].all() and p.planned.tolist() == [2, 4, 4]
    assert p.missing(Records(pos, idx, reward))[1].tolist() == [2, 3]  # task 2's next round
    # under the default min_rollouts 2, task 0's one scored rollout is the export's no_rollouts
    # drop, and the plan says so
    p = plan(EXACT, Export(), k, labels, Records(pos, idx, reward))
    assert p.done[0] and not p.keep[0] and p.keep[1]
    # task 1 with only its first round: 0 and a failure settle nothing yet (tasks 0 and 1
    # alone: with task 2's first round unknown, the label's 0/1 flag would not be settled)
    p = plan(EXACT, Export(), k[:2], labels[:2], Records(pos[:4], idx[:4], reward[:4]))
    assert not p.done[1] and p.planned[1] == 4
    drop = Export(on_undecided="drop", min_rollouts=1)
    assert not plan(EXACT, drop, k[:1], labels[:1], Records(pos[:2], idx[:2], reward[:2])).keep[0]


def test_partial_credit_settles_once_two_values_are_seen():
    k, labels = np.array([8, 8]), np.array(["a", "a"], dtype=object)
    pos, idx = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    reward = np.array([0.0, 0.5, 0.5, 0.5])
    p = plan(EXACT, Export(), k, labels, Records(pos, idx, reward))
    assert p.done.tolist() == [True, False] and p.keep[0] and p.stopped_early[0]


def test_no_task_is_tested_before_its_labels_0_1_flag_is_settled():
    # a rerun found task 0's first round journaled and task 1's not: whether the label is 0/1
    # hangs on task 1's first round, so task 0 waits (else its test could use a flag the
    # undisturbed run never had, and sample rollouts that run does not)
    k, labels = np.array([8, 8]), np.array(["a", "a"], dtype=object)
    part = Records(np.array([0, 0]), np.array([0, 1]), np.array([1.0, 1.0]))
    p = plan(EXACT, Export(), k, labels, part)
    assert p.planned.tolist() == [2, 2] and not p.done.any()
    assert p.missing(part)[0].tolist() == [1, 1]  # task 1's first round only
    # task 1 shows partial credit: the label is not 0/1, and both tasks are tested on that
    whole = Records(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), np.array([1, 1, 1, 0.5]))
    assert plan(EXACT, Export(), k, labels, whole).done.tolist() == [False, True]
    # a partial-credit reward settles the label before the rest of its first round is known
    odd = Records(np.array([0, 0]), np.array([0, 1]), np.array([1.0, 0.5]))
    assert plan(EXACT, Export(), k, labels, odd).done.tolist() == [True, False]


def test_plan_refuses_what_it_cannot_settle():
    k, labels, none = np.array([4]), np.array(["a"], dtype=object), Records(*[np.zeros(0)] * 3)
    with pytest.raises(ValueError, match="cannot settle posterior keep rules"):
        plan(EXACT, Export(min_signal_probability=0.5), k, labels, none)
    rec = Records(np.zeros(4, np.int64), np.arange(4), np.zeros(4))
    with pytest.raises(ValueError, match="no prior for label 'a'"):
        plan(BAYES, Export(), k, labels, rec, priors={})


def test_missing_ignores_records_past_the_plan_of_other_tasks():
    # task 0 has records up to index 9 (a fixed-K run's); task 1 needs its first two (its
    # own label: task 0's is settled by its first round alone)
    k, labels = np.array([10, 10]), np.array(["a", "b"], dtype=object)
    rec = Records(np.zeros(10, np.int64), np.arange(10), np.array([1.0, 0.0] * 5))
    p = plan(EXACT, Export(), k, labels, rec)
    assert p.planned.tolist() == [2, 2] and p.done.tolist() == [True, False]
    pos, idx = p.missing(rec)
    assert pos.tolist() == [1, 1] and idx.tolist() == [0, 1]


def test_adaptive_config_section():
    base = "entries: [{label: a, environment: math, source: x}]\n"
    # YAML 1.1 reads a bare `off` as false: still the mode "off"
    assert validate_config(yaml.safe_load(base + "adaptive: {mode: off}")).adaptive.mode == "off"
    cfg = validate_config(yaml.safe_load(base + "adaptive: {mode: bayes, delta: 0.05}"))
    assert (cfg.adaptive.mode, cfg.adaptive.delta, cfg.adaptive.min_rollouts) == ("bayes", 0.05, 4)
    with pytest.raises(ConfigError, match="exact cannot settle the posterior keep rules"):
        validate_config(
            yaml.safe_load(base + "adaptive: {mode: exact}\nexport: {min_signal_probability: 0.5}")
        )
    with pytest.raises(ConfigError, match="adaptive.delta"):
        validate_config(yaml.safe_load(base + "adaptive: {mode: bayes, delta: 0}"))
