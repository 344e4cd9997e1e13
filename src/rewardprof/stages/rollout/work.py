"""What a shard's workers sample: a fixed list of rollouts, or adaptive sampling's plan, which
grows while the job runs.

`ShardRun.generate` pulls request units from a work source (`units()`) and tells it each unit's
results (`finished`). `FixedWork` is the rollouts missing at the start (fixed K, the first
round). `TaskPlanner` is adaptive sampling without a round barrier: a task's next round is
planned as soon as its previous one returned, not when the whole shard's round did, so no
engine slot waits for the slowest task of a round.

Why the pairs are the same as planning round by round (decisions/adaptive_plan.py): the plan of
a task is a function of its own results below its round size, its K and label, the label's
prior (fixed before the rounds start: adaptive/prior.json) and whether its label's rewards are
0/1. The last one is a property of the label: under bayes the prior says it; otherwise it is
read from the whole shard's first round, so until every task's first round is known only
first-round rollouts are sampled (exact mode keeps that one barrier).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from rewardprof.decisions.adaptive_plan import AdaptiveSettings, Plan, Records, label_binary, plan
from rewardprof.decisions.label_prior import LabelPrior
from rewardprof.stages.rollout.shard_tasks import Unit, request_units

# (rollout_index, reward); NaN: the rollout failed in this job (known, not sampled again)
Results = list[tuple[int, float]]


class FixedWork:
    """The rollouts to sample are known at the start."""

    def __init__(self, missing: list[list[int]], max_n: int):
        self.missing, self.max_n = missing, max_n
        self.sent = sum(len(m) for m in missing)
        self.on_add = None  # nothing is ever added

    def pending(self) -> int:
        return self.sent

    def positions(self) -> list[int]:
        """The tasks that get requests, in the order they get them."""
        return [p for p, m in enumerate(self.missing) if m]

    async def units(self) -> AsyncIterator[Unit]:
        for unit in request_units(self.missing, self.max_n):
            yield unit

    def finished(self, unit: Unit, results: Results) -> None:
        """Nothing follows from a result."""


class TaskPlanner:
    """Adaptive sampling's rollouts, planned task by task as their rounds return (module doc).
    `records` and `plan_`: the shard's known results and their plan when the job starts."""

    def __init__(
        self,
        settings: AdaptiveSettings,
        ex,
        num_repeats: np.ndarray,
        labels: np.ndarray,
        priors: dict | None,
        pass_threshold: float,
        audit: np.ndarray | None,
        records: Records,
        plan_: Plan,
        max_n: int,
        prior_keys: np.ndarray | None = None,
    ):
        self.settings, self.ex, self.priors = settings, ex, priors
        self.k = np.asarray(num_repeats, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=object)
        self.pass_threshold, self.max_n = pass_threshold, max_n
        # per task, the key of its prior (a warm-started task's own: decisions/warm_start.py)
        self.prior_keys = None if prior_keys is None else np.asarray(prior_keys, dtype=object)
        self.audit = np.zeros(len(self.k), bool) if audit is None else np.asarray(audit, bool)
        self.results: list[dict[int, float]] = [{} for _ in range(len(self.k))]
        for p, r, v in zip(
            records.pos.tolist(),
            records.rollout_index.tolist(),
            records.reward.tolist(),
            strict=True,
        ):
            self.results[p][r] = v
        self.first = np.minimum(settings.first, self.k)
        self._first_open = sum(not self._first_known(p) for p in range(len(self.k)))
        self.binary: np.ndarray | None = None
        if priors and all(isinstance(v, LabelPrior) for v in priors.values()):
            self.binary = label_binary(records, self.labels, settings.first, priors)
        self.inflight = np.zeros(len(self.k), dtype=np.int64)
        self.queue: deque[Unit] = deque()
        self.held: set[int] = set()  # first round known, waiting for the labels' 0/1 answer
        self.dirty: set[int] = set()
        self.sent = 0
        self.on_add = None  # called with how many rollouts were added (the job's progress)
        self._wake: asyncio.Event | None = None
        if self.binary is not None or self._first_open == 0:
            pos, idx = plan_.missing(records)
            self._enqueue(pos.tolist(), idx.tolist())
        else:
            self._replan(set(range(len(self.k))))

    def pending(self) -> int:
        return sum(len(u.indices) for u in self.queue)

    def positions(self) -> list[int]:
        """The tasks that get requests now, in order (later rounds: the same tasks)."""
        return sorted({u.pos for u in self.queue})

    def _first_known(self, p: int) -> bool:
        return all(r in self.results[p] for r in range(int(self.first[p])))

    def _enqueue(self, pos: list[int], idx: list[int]) -> None:
        """Units for (task position, rollout index) pairs given in task then index order."""
        todo: dict[int, list[int]] = {}
        for p, r in zip(pos, idx, strict=True):
            todo.setdefault(p, []).append(r)
        added = 0
        for p, indices in todo.items():
            for unit in request_units([indices], self.max_n):
                self.queue.append(Unit(p, unit.indices))
                self.inflight[p] += 1
                added += len(unit.indices)
        self.sent += added
        if added and self.on_add is not None:
            self.on_add(added)

    def _replan(self, tasks: set[int]) -> None:
        if self.binary is None and self._first_open == 0:
            every = self._records(np.arange(len(self.k)))
            self.binary = label_binary(every, self.labels, self.settings.first, self.priors)
            tasks, self.held = tasks | self.held, set()
        if self.binary is None:  # only the first round until every task's is known
            pos, idx = [], []
            for p in sorted(tasks):
                need = [r for r in range(int(self.first[p])) if r not in self.results[p]]
                pos += [p] * len(need)
                idx += need
                if not need:
                    self.held.add(p)
            self._enqueue(pos, idx)
            return
        at = np.array(sorted(tasks), dtype=np.int64)
        if not len(at):
            return
        records = self._records(at)
        sub = plan(
            self.settings,
            self.ex,
            self.k[at],
            self.labels[at],
            records,
            self.priors,
            self.pass_threshold,
            self.audit[at],
            self.binary[at],
            None if self.prior_keys is None else self.prior_keys[at],
        )
        local, idx = sub.missing(records)
        self._enqueue(at[local].tolist(), idx.tolist())

    def _records(self, at: np.ndarray) -> Records:
        """The known results of the tasks at positions `at`, numbered 0..len(at)-1."""
        pos, idx, reward = [], [], []
        for j, p in enumerate(at.tolist()):
            for r, v in self.results[p].items():
                pos.append(j)
                idx.append(r)
                reward.append(v)
        return Records(
            np.asarray(pos, dtype=np.int64),
            np.asarray(idx, dtype=np.int64),
            np.asarray(reward, dtype=float),
        )

    def finished(self, unit: Unit, results: Results) -> None:
        p = unit.pos
        first_was_known = self._first_known(p)
        for r, v in results:
            self.results[p][r] = v
        if not first_was_known and self._first_known(p):
            self._first_open -= 1
        self.inflight[p] -= 1
        if self.inflight[p] == 0:
            self.dirty.add(p)
            if self._wake is not None:
                self._wake.set()

    async def units(self) -> AsyncIterator[Unit]:
        """Units as they are planned; ends when nothing is queued, in flight or to plan."""
        self._wake = asyncio.Event()
        while True:
            if self.queue:
                yield self.queue.popleft()
                continue
            if self.dirty:
                dirty, self.dirty = self.dirty, set()
                self._replan(dirty)
                continue
            if not self.inflight.any():
                return
            self._wake.clear()
            await self._wake.wait()
