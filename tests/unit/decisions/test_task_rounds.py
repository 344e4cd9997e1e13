"""The no-barrier planner (decisions/planning/task_rounds.py) against the round-synchronous one
(`plan` on every task after every round returned): the same (task, rollout) pairs, plans and
decisions on the same rewards, whatever order the rewards arrive in, per shard of 1 or 3, and
after a kill and a rerun that starts from what was journaled."""

from __future__ import annotations

import numpy as np
import pytest
from harness.examples import derandomized
from harness.rounds import round_synchronous as reference
from hypothesis import given
from hypothesis import strategies as st

from rewardprof.core.config import Export
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records
from rewardprof.decisions.planning.task_rounds import TaskRounds
from rewardprof.decisions.priors.label import LabelPrior, fit_label_priors

K = 8
EXACT = AdaptiveSettings("exact", first=2, round_size=2)
BAYES = AdaptiveSettings("bayes", first=2, round_size=2, delta=0.05)
_FITTED = fit_label_priors(np.full(40, 4), np.arange(40) % 5, np.full(40, "a"), {"a": True})["a"]
PRIORS = {
    # LabelPriors say whether a label is 0/1, audit included
    "label": {
        "a": LabelPrior(**{**_FITTED.__dict__, "audit_share": 0.3}),
        "b": LabelPrior(**{**_FITTED.__dict__, "binary": False, "stop_mode": "exact"}),
    },
}
# warm start: some tasks of label a have a prior of their own, one that expects passes
_WARM = fit_label_priors(np.full(40, 4), np.full(40, 4), np.full(40, "a"), {"a": True})
PRIORS["warm"] = {**PRIORS["label"], "a-warm": _WARM["a"]}
CASES = {
    "exact": (EXACT, None),
    "bayes-label": (BAYES, PRIORS["label"]),
    "bayes-warm": (BAYES, PRIORS["warm"]),
}


def _audit(case: str, n: int) -> np.ndarray | None:
    return (np.arange(n) % 4 == 0) if case == "bayes-label" else None


def _keys(case: str, labels: np.ndarray) -> np.ndarray | None:
    if case != "bayes-warm":
        return None
    return np.where((labels == "a") & (np.arange(len(labels)) % 2 == 0), "a-warm", labels)


def round_synchronous(case: str, rewards, k, labels) -> tuple[set, object]:
    settings_, priors = CASES[case]
    audit, keys = _audit(case, len(k)), _keys(case, labels)
    return reference(settings_, Export(), k, labels, rewards, priors, 1.0, audit, keys)


def no_barrier(case, rewards, k, labels, pick, journaled=()) -> tuple[set, object, set]:
    """TaskRounds with results arriving in the order `pick` chooses (it gets the number of
    outstanding rollouts, returns which one arrives next, or None: the job is killed).
    `journaled`: results of an earlier attempt. (pairs asked for, plan or None if killed,
    results returned)."""
    settings_, priors = CASES[case]
    start = sorted(journaled)
    records = Records(
        np.array([p for p, _ in start], np.int64),
        np.array([r for _, r in start], np.int64),
        np.array([rewards[p, r] for p, r in start], float),
    )
    audit, keys = _audit(case, len(k)), _keys(case, labels)
    rounds = TaskRounds(settings_, Export(), k, labels, records, priors, 1.0, audit, keys)
    outstanding: list[tuple[int, int]] = []
    asked, returned = set(), set(journaled)
    while True:
        for p, indices in rounds.take():
            new = [(p, r) for r in indices]
            assert not asked & set(new), "a pair asked for twice in one job"
            asked |= set(new)
            outstanding += new
        if rounds.finished:
            return asked, rounds.result(), returned
        assert outstanding, "not finished, yet nothing outstanding"
        i = pick(len(outstanding))
        if i is None:
            return asked, None, returned
        p, r = outstanding.pop(i)
        rounds.returned(p, r, rewards[p, r])
        if not np.isnan(rewards[p, r]):  # the journal keeps failures, a rerun retries them
            returned.add((p, r))


reward_values = st.sampled_from([0.0, 1.0, np.nan, 0.5])
# a task: its label, its K, and its rewards: a constant run (where bayes stops early and a
# label's 0/1 flag decides whether it may) with a few values changed, or any rewards
task_rewards = st.one_of(
    st.tuples(
        st.sampled_from([0.0, 1.0]),
        st.lists(st.tuples(st.integers(0, K - 1), reward_values), max_size=2),
    ).map(lambda t: [dict(t[1]).get(r, t[0]) for r in range(K)]),
    st.lists(reward_values, min_size=K, max_size=K),
)
tasks_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(1, K), task_rewards),
    min_size=1,
    max_size=12,
)


def _table(tasks, partial_credit: bool):
    labels = np.array([t[0] for t in tasks], dtype=object)
    k = np.array([t[1] for t in tasks], dtype=np.int64)
    rewards = np.array([t[2] for t in tasks], dtype=float)
    if not partial_credit:  # label a stays 0/1 unless the case asks for partial credit
        rewards[(labels == "a")[:, None] & (rewards == 0.5)] = 1.0
    return rewards, k, labels


def _same(a_pairs, a_plan, b_pairs, b_plan) -> None:
    assert a_pairs == b_pairs
    for field in ("planned", "done", "stopped_early", "keep"):
        assert (getattr(a_plan, field) == getattr(b_plan, field)).all(), field


@derandomized(40)
@given(
    case=st.sampled_from(sorted(CASES)),
    tasks=tasks_strategy,
    partial_credit=st.booleans(),
    num_shards=st.sampled_from([1, 3]),
    data=st.data(),
)
def test_any_arrival_order_gives_the_round_synchronous_pairs_and_decisions(
    case, tasks, partial_credit, num_shards, data
):
    rewards, k, labels = _table(tasks, partial_credit)
    for shard in range(num_shards):  # each shard's job plans its own tasks
        rows = np.flatnonzero(np.arange(len(k)) % num_shards == shard)
        if not len(rows):
            continue
        args = (rewards[rows], k[rows], labels[rows])
        want_pairs, want_plan = round_synchronous(case, *args)
        pick = lambda n: data.draw(st.integers(0, n - 1))  # noqa: E731
        pairs, got_plan, _ = no_barrier(case, *args, pick)
        _same(pairs, got_plan, want_pairs, want_plan)


@derandomized(30)
@given(
    case=st.sampled_from(sorted(CASES)),
    tasks=tasks_strategy,
    kill_after=st.integers(0, 40),
    data=st.data(),
)
def test_a_killed_job_and_its_rerun_sample_the_round_synchronous_pairs(
    case, tasks, kill_after, data
):
    rewards, k, labels = _table(tasks, partial_credit=True)
    want_pairs, want_plan = round_synchronous(case, rewards, k, labels)
    arrived = iter(range(kill_after))

    def until_killed(n):
        return None if next(arrived, None) is None else data.draw(st.integers(0, n - 1))

    first, killed, journaled = no_barrier(case, rewards, k, labels, until_killed)
    pick = lambda n: data.draw(st.integers(0, n - 1))  # noqa: E731
    again, got_plan, _ = no_barrier(case, rewards, k, labels, pick, journaled)
    # nothing outside the round-synchronous pairs, and the rerun's plan is its plan
    assert first | again == want_pairs
    _same(want_pairs, got_plan, want_pairs, want_plan)
    # the rerun asks only for what the journal lacks
    assert not again & journaled


def test_a_task_is_planned_again_while_another_task_is_out():
    """No barrier: task 0's second round is asked for while task 1's first round is out."""
    rewards = np.ones((2, K))
    labels = np.array(["a", "a"], dtype=object)
    # the label's LabelPrior says its rewards are 0/1: no wait for the label's first round
    prior = {"a": PRIORS["label"]["a"]}
    rounds = TaskRounds(EXACT, Export(), np.array([K, K]), labels, _empty(), prior)
    assert rounds.take() == [(0, [0, 1]), (1, [0, 1])]
    rounds.returned(0, 0, rewards[0, 0])
    rounds.returned(0, 1, rewards[0, 1])
    rounds.returned(1, 0, rewards[1, 0])
    assert rounds.take() == [(0, [2, 3])]  # task 1's rollout 1 is still out
    assert not rounds.finished


def test_a_label_without_its_0_1_flag_waits_only_where_the_flag_decides():
    """exact, no LabelPrior: while a label's 0/1 flag is open (a reward of 0.5 still to come
    makes it partial credit), a task that goes on the same way under either flag asks for its
    next round at once (a shard's job does not drain its first round before its second); one
    whose next step depends on the flag waits for it, then is planned on the settled flag."""
    labels = np.array(["a", "a"], dtype=object)
    rounds = TaskRounds(EXACT, Export(), np.array([K, K]), labels, _empty())
    rounds.take()
    for r in (0, 1):
        rounds.returned(0, r, 1.0)
    rounds.returned(1, 0, 1.0)
    assert rounds.take() == [(0, [2, 3])]  # all-same at 2: goes on under either flag
    # under min_grpo_signal a mixed task is kept at 2 if the label is 0/1, decided at K if not
    graded = Export(min_grpo_signal=0.3)
    rounds = TaskRounds(EXACT, graded, np.array([K, K]), labels, _empty())
    rounds.take()
    rounds.returned(0, 0, 0.0)
    rounds.returned(0, 1, 1.0)
    rounds.returned(1, 0, 1.0)
    assert rounds.take() == []  # task 0 waits for the label's flag, not for a round
    rounds.returned(1, 1, 0.5)
    assert rounds.take() == [(0, [2, 3]), (1, [2, 3])]  # partial credit: decided at K
    assert not rounds.done[0] and not rounds.done[1]


def test_returning_a_rollout_not_asked_for_is_an_error():
    rounds = TaskRounds(EXACT, Export(), np.array([K]), np.array(["a"], dtype=object), _empty())
    with pytest.raises(ValueError, match="not asked for"):
        rounds.returned(0, 0, 1.0)


def _empty() -> Records:
    return Records(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
