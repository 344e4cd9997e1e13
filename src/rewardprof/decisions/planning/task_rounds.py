"""Adaptive rounds without a barrier: a task's next round is planned as soon as its own last
round returned, not when every task's has.

`plan` (adaptive_plan.py) decides a task from its own results, its label's prior and whether
its label's rewards are 0/1, and that flag is settled by the label's first round (or given by
its LabelPrior) and fixed from then on. So a task planned alone, the moment every rollout it
asked for is known, gets the plan the round-synchronous planner gives it on the same results:
the same (task, rollout) pairs and the same decision, whatever order results arrive in. The one
wait left is on a label whose 0/1 flag is not settled yet (no LabelPrior: exact mode, bayes'
first round): a task whose first round is known and whose next step is the same under either
flag takes it at once (the settled flag would ask for the same rollouts); one whose next step
depends on it (a mixed task under export.min_grpo_signal) waits until every task of the label
has its first round known or one of them showed a reward other than 0 and 1.

Pure bookkeeping, no I/O: the rollout stage asks `take` what to sample, and reports each
result with `returned` (reward NaN: failed, which the plan treats as known, like the
round-synchronous planner treats a failure of the same job).
"""

from __future__ import annotations

import numpy as np

from rewardprof.decisions.planning.round_plan import (
    AdaptiveSettings,
    Plan,
    Records,
    label_binary,
    plan,
)


class TaskRounds:
    """Each task's plan, advanced task by task (see the module doc). `records`: the results
    known at the start (a rerun's journal); `ex`, `priors`, `pass_threshold`, `audit`,
    `prior_keys`: as `plan` takes them."""

    def __init__(
        self,
        settings: AdaptiveSettings,
        ex,
        num_repeats: np.ndarray,
        labels: np.ndarray,
        records: Records,
        priors: dict | None = None,
        pass_threshold: float = 1.0,
        audit: np.ndarray | None = None,
        prior_keys: np.ndarray | None = None,
    ):
        self._settings, self._ex, self._priors = settings, ex, priors
        # per task, the key of its prior (a warm-started task's own: decisions/priors/warm_start.py)
        self._prior_keys = None if prior_keys is None else np.asarray(prior_keys, dtype=object)
        self._pass_threshold = pass_threshold
        self._k = np.asarray(num_repeats, dtype=np.int64)
        self._labels = np.asarray(labels, dtype=object)
        size = len(self._k)
        self._audit = np.zeros(size, bool) if audit is None else np.asarray(audit, dtype=bool)
        self._n_first = np.minimum(settings.first, self._k)
        self._known: list[dict[int, float]] = [{} for _ in range(size)]
        columns = (records.pos, records.rollout_index, records.reward)
        for p, r, v in zip(*(c.tolist() for c in columns), strict=True):
            self._known[p][r] = v
        self._binary, self._settled = label_binary(
            records, self._labels, self._k, settings.first, priors
        )
        # unsettled label -> its tasks whose first round is not all known yet
        self._first_open: dict[object, set[int]] = {}
        for p in np.flatnonzero(~self._settled).tolist():
            if not self._first_round_known(p):
                self._first_open.setdefault(self._labels[p], set()).add(p)
        self._parked: dict[object, list[int]] = {}  # first round known, label not settled
        self._asked = np.zeros(size, dtype=np.int64)  # asked for and not returned yet
        self._ready: set[int] = set(range(size))  # to plan at the next `take`
        self.planned = self._n_first.copy()
        self.done = np.zeros(size, dtype=bool)
        self.keep = np.zeros(size, dtype=bool)

    @property
    def finished(self) -> bool:
        """Nothing asked for is outstanding and no task waits to be planned."""
        return not self._ready and not self._asked.any()

    def result(self) -> Plan:
        """The plan of every task (once finished: the final one)."""
        if not self.finished or self._parked:
            raise RuntimeError("adaptive rounds: the plan is not finished")
        return Plan(self.planned, self.done, self.done & (self.planned < self._k), self.keep)

    def take(self) -> list[tuple[int, list[int]]]:
        """Plan every task whose asked-for rollouts all returned: (task position, rollout
        indices to sample now) in task order; the tasks planned together in one call."""
        ready = sorted(self._ready)
        self._ready.clear()
        asks: dict[int, list[int]] = {}
        settled = [p for p in ready if self._settled[p]]
        waiting = []
        for p in (p for p in ready if not self._settled[p]):
            missing = [r for r in range(int(self._n_first[p])) if r not in self._known[p]]
            if missing:
                asks[p] = missing
            else:
                waiting.append(p)
        if waiting:
            asks.update(self._either_flag(np.asarray(waiting, dtype=np.int64)))
        if settled:
            asks.update(self._plan(np.asarray(settled, dtype=np.int64)))
        for p, indices in asks.items():
            self._asked[p] += len(indices)
        return sorted(asks.items())

    def returned(self, pos: int, rollout_index: int, reward: float) -> None:
        """A result of a rollout `take` asked for (reward NaN: it failed)."""
        if self._asked[pos] <= 0:
            raise ValueError(f"adaptive rounds: task {pos} rollout {rollout_index} not asked for")
        self._known[pos][rollout_index] = reward
        self._asked[pos] -= 1
        label = self._labels[pos]
        if not self._settled[pos] and rollout_index < self._n_first[pos]:
            if not np.isnan(reward) and reward not in (0.0, 1.0):
                self._settle(label, binary=False)
            elif self._first_round_known(pos):
                waiting = self._first_open.get(label, set())
                waiting.discard(pos)
                if not waiting:
                    self._settle(label, binary=True)
        if self._asked[pos] == 0:
            self._ready.add(pos)

    def _first_round_known(self, p: int) -> bool:
        return all(r in self._known[p] for r in range(int(self._n_first[p])))

    def _settle(self, label, binary: bool) -> None:
        of = self._labels == label
        self._binary[of], self._settled[of] = binary, True
        self._first_open.pop(label, None)
        self._ready.update(self._parked.pop(label, []))

    def _either_flag(self, rows: np.ndarray) -> dict[int, list[int]]:
        """Tasks whose first round is known while their label's 0/1 flag is not: a task that
        goes on the same way under either flag asks for its next round now (the flag, once
        settled, would ask for the same rollouts: a shard's job does not drain its first
        round before its second), the others wait for the flag."""
        binary = self._plan(rows, np.ones(len(rows), bool), keep=False)
        partial = self._plan(rows, np.zeros(len(rows), bool), keep=False)
        asks = {}
        for p in rows.tolist():
            if p in binary and binary[p] == partial.get(p):
                asks[p] = binary[p]
            else:
                self._parked.setdefault(self._labels[p], []).append(p)
        return asks

    def _plan(self, rows: np.ndarray, binary=None, keep: bool = True) -> dict[int, list[int]]:
        """Plan the tasks at `rows` alone on their own results (`binary`: their labels' 0/1
        flags, the settled ones when None; `keep`: record the plan); their rollouts still
        missing."""
        pos, idx, reward = [], [], []
        for i, p in enumerate(rows.tolist()):
            known = self._known[p]
            pos.extend([i] * len(known))
            idx.extend(known)
            reward.extend(known.values())
        records = Records(
            np.asarray(pos, dtype=np.int64),
            np.asarray(idx, dtype=np.int64),
            np.asarray(reward, dtype=float),
        )
        part = plan(
            self._settings,
            self._ex,
            self._k[rows],
            self._labels[rows],
            records,
            self._priors,
            self._pass_threshold,
            self._audit[rows],
            binary=self._binary[rows] if binary is None else binary,
            prior_keys=None if self._prior_keys is None else self._prior_keys[rows],
        )
        if keep:
            self.planned[rows], self.done[rows] = part.planned, part.done
            self.keep[rows] = part.keep
        asks: dict[int, list[int]] = {}
        for i, r in zip(*(a.tolist() for a in part.missing(records)), strict=True):
            asks.setdefault(int(rows[i]), []).append(r)
        return asks
