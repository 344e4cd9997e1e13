"""Property tests (hypothesis) of the adaptive planner: the pairs it asks for, and its
decisions, do not depend on the order (or the batches) in which rewards arrive; planned task by
task without a round barrier (stages/rollout/work.py), they are the round-by-round planner's.

Derandomized (the same examples on every run, so CI is reproducible) and sized so the whole of
L0 stays within its time budget."""

from __future__ import annotations

import asyncio
import io
import random

import numpy as np
from harness.examples import derandomized
from hypothesis import given
from hypothesis import strategies as st

from rewardprof.core.config import Export
from rewardprof.core.kinds import OK
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.task_rounds import TaskRounds
from rewardprof.decisions.priors.label import fit_label_priors
from rewardprof.decisions.priors.posterior import fit_prior
from rewardprof.stages.rollout.progress import Progress
from rewardprof.stages.rollout.sampling_loop import SamplingLoop
from rewardprof.stages.rollout.work import RoundsWork

PLAN_K = 8
# bayes' LabelPrior for label "a", fitted on a first round of 2 rollouts over 30 tasks
_N, _C = np.full(30, 2), np.array([0] * 12 + [1] * 8 + [2] * 10)
PRIORS = fit_label_priors(
    _N, _C, np.full(30, "a", dtype=object), {"a": True}, mixtures={"a": fit_prior(_N, _C)}
)
PLANNERS = {
    "exact": AdaptiveSettings("exact", first=2, round_size=2),
    "bayes": AdaptiveSettings("bayes", first=2, round_size=2, delta=0.05),
}
rewards_of_tasks = st.lists(
    st.lists(st.sampled_from([0.0, 1.0, np.nan]), min_size=PLAN_K, max_size=PLAN_K),
    min_size=1,
    max_size=12,
)


def _sample_until_done(mode: str, rewards: np.ndarray, arrivals) -> tuple[set, np.ndarray]:
    """The rollout loop, with results arriving in an order and batches `arrivals` chooses: ask
    the planner what is missing, let some of those results arrive, ask again."""
    tasks = len(rewards)
    k, labels = np.full(tasks, PLAN_K), np.full(tasks, "a", dtype=object)
    pos, idx = np.zeros(0, np.int64), np.zeros(0, np.int64)
    while True:
        records = Records(pos, idx, rewards[pos, idx])
        p = plan(PLANNERS[mode], Export(), k, labels, records, PRIORS)
        if p.done.all():
            return set(zip(pos.tolist(), idx.tolist(), strict=True)), p.keep
        new_pos, new_idx = p.missing(records)
        assert len(new_pos), "a plan that is not done must ask for rollouts"
        order = arrivals(list(range(len(new_pos))))
        batch = order[: max(1, len(order) // 2)] if len(order) > 1 else order
        pos = np.concatenate([pos, new_pos[batch]])
        idx = np.concatenate([idx, new_idx[batch]])


@derandomized(20)
@given(
    mode=st.sampled_from(sorted(PLANNERS)),
    rewards=rewards_of_tasks,
    data=st.data(),
)
def test_the_planner_asks_for_the_same_pairs_whatever_order_rewards_arrive_in(mode, rewards, data):
    rewards = np.array(rewards, dtype=float)
    in_order = _sample_until_done(mode, rewards, lambda ids: ids)
    shuffled = _sample_until_done(mode, rewards, lambda ids: data.draw(st.permutations(ids)))
    assert shuffled[0] == in_order[0]  # the same (task, rollout) pairs sampled
    assert (shuffled[1] == in_order[1]).all()  # the same decisions


def _sample_without_barrier(mode: str, rewards: np.ndarray, seed: int, workers: int):
    """The rollout job's loop with the task planner: `workers` workers take request units as
    they are planned and return their results after a number of event-loop turns a seeded
    random chooses, so rounds of different tasks overlap in an arbitrary order."""
    settings_, priors = PLANNERS[mode], PRIORS if mode == "bayes" else None
    tasks = len(rewards)
    k, labels = np.full(tasks, PLAN_K), np.full(tasks, "a", dtype=object)
    none = Records(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    work = RoundsWork(TaskRounds(settings_, Export(), k, labels, none, priors, 1.0), 2)
    rng, sampled = random.Random(seed), []

    async def sample_unit(unit) -> None:  # results after a seeded number of loop turns
        for _ in range(rng.randrange(6)):
            await asyncio.sleep(0)
        sampled.extend((unit.pos, r) for r in unit.indices)
        for r in unit.indices:
            reward = rewards[unit.pos, r]
            work.returned(unit.pos, r, "engine_error" if np.isnan(reward) else OK, reward)

    async def no_text(pos: int) -> None:
        pass

    async def main() -> None:  # the rollout job's own feed and workers
        progress = Progress(0, "test", 60.0, stream=io.StringIO(), run_stream=io.StringIO())
        await SamplingLoop(work, sample_unit, no_text, progress, workers, lambda: 0).run()

    asyncio.run(main())
    assert len(set(sampled)) == len(sampled)  # no rollout asked for twice
    pos = np.array([p for p, _ in sampled], dtype=np.int64)
    idx = np.array([r for _, r in sampled], dtype=np.int64)
    final = plan(settings_, Export(), k, labels, Records(pos, idx, rewards[pos, idx]), priors)
    assert final.done.all()
    return set(sampled), final.keep, len(sampled)


@derandomized(30)
@given(
    mode=st.sampled_from(["exact", "bayes"]),
    rewards=st.lists(
        st.lists(st.sampled_from([0.0, 1.0, 0.5, np.nan]), min_size=PLAN_K, max_size=PLAN_K),
        min_size=1,
        max_size=12,
    ),
    seed=st.integers(0, 2**32 - 1),
    workers=st.integers(1, 4),
)
def test_planning_task_by_task_samples_the_round_by_round_pairs(mode, rewards, seed, workers):
    rewards = np.array(rewards, dtype=float)
    if mode == "bayes":  # a LabelPrior answers 0/1 for its label: keep the rewards so
        rewards = np.where(rewards == 0.5, 1.0, rewards)
    settings_, priors = PLANNERS[mode], PRIORS if mode == "bayes" else None
    tasks = len(rewards)
    k, labels = np.full(tasks, PLAN_K), np.full(tasks, "a", dtype=object)
    pos, idx = np.zeros(0, np.int64), np.zeros(0, np.int64)
    while True:  # round by round: every missing result arrives before the next plan
        records = Records(pos, idx, rewards[pos, idx])
        p = plan(settings_, Export(), k, labels, records, priors)
        new_pos, new_idx = p.missing(records)
        if not len(new_pos):
            break
        pos, idx = np.concatenate([pos, new_pos]), np.concatenate([idx, new_idx])
    pairs, keep, sent = _sample_without_barrier(mode, rewards, seed, workers)
    assert pairs == set(zip(pos.tolist(), idx.tolist(), strict=True))
    assert (keep == p.keep).all() and sent == len(pairs)
