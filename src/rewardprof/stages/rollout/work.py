"""What a shard's job samples, in the form the runner's feed takes it: `take` the requests due
now, report each result with `returned`, stop when `finished`.

- FixedWork: every missing rollout is known up front (fixed K, bayes' first round).
- RoundsWork: adaptive rounds, each task's next round asked for as soon as its own last round
  returned (decisions/planning/task_rounds.py), never waiting for the other tasks of the shard.
"""

from __future__ import annotations

import numpy as np

from rewardprof.core.kinds import OK
from rewardprof.decisions.planning.task_rounds import TaskRounds
from rewardprof.stages.rollout.shard_tasks import Unit, request_units


class FixedWork:
    """Per task position, the rollout indices to sample, all asked for at once."""

    def __init__(self, missing: list[list[int]], max_n: int):
        self._missing, self._max_n, self._taken = missing, max_n, False

    @property
    def pending(self) -> int:
        """Rollouts the next `take` asks for."""
        return 0 if self._taken else sum(len(m) for m in self._missing)

    @property
    def finished(self) -> bool:
        return self._taken

    def positions(self) -> list[int]:
        """The tasks this work may ask rollouts of, in table order (whose text to read)."""
        return [p for p, m in enumerate(self._missing) if m]

    def take(self) -> list[Unit]:
        units = [] if self._taken else list(request_units(self._missing, self._max_n))
        self._taken = True
        return units

    def returned(self, pos: int, rollout_index: int, status: str, reward: float | None) -> None:
        """Nothing to plan on: every rollout was asked for at the start."""


class RoundsWork:
    """Adaptive rounds task by task (`rounds`: their planner, started on the journal)."""

    def __init__(self, rounds: TaskRounds, max_n: int):
        self.rounds, self._max_n = rounds, max_n
        self._next = self._units(rounds.take())  # asked for at the start
        self._positions = np.flatnonzero(~rounds.done).tolist()

    @property
    def pending(self) -> int:
        return sum(len(u.indices) for u in self._next)

    @property
    def finished(self) -> bool:
        return not self._next and self.rounds.finished

    def positions(self) -> list[int]:
        """The tasks not decided on the journal: the only ones that can need rollouts."""
        return self._positions

    def take(self) -> list[Unit]:
        units, self._next = self._next or self._units(self.rounds.take()), []
        return units

    def returned(self, pos: int, rollout_index: int, status: str, reward: float | None) -> None:
        # a failure of this job is known to the plan (not retried in it), its reward unknown
        known = float(reward) if status == OK and reward is not None else float("nan")
        self.rounds.returned(pos, rollout_index, known)

    def _units(self, asks: list[tuple[int, list[int]]]) -> list[Unit]:
        missing: dict[int, list[int]] = dict(asks)
        units = []
        for pos, indices in missing.items():
            lists = [indices]  # request_units splits one task's indices into requests
            units += [Unit(pos, u.indices) for u in request_units(lists, self._max_n)]
        return units
