"""What a shard's job samples (`Work`), in the form the runner's feed takes it: `take` the
requests due now, report each result with `returned`, stop when `finished`; at the end the job
asks the work to `finish`: which rollouts of each task the output holds, and the metadata it
carries. The shard job runs any work alike (it knows nothing of adaptive sampling).

- FixedWork: every missing rollout is known up front (fixed K, bayes' first round).
- RoundsWork: adaptive rounds, each task's next round asked for as soon as its own last round
  returned (decisions/planning/task_rounds.py), never waiting for the other tasks of the shard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from rewardprof.core.kinds import OK
from rewardprof.decisions.planning.task_rounds import TaskRounds
from rewardprof.stages.rollout.shard_tasks import Unit, request_units

# what a work's `finish` returns: per task position, the rollouts the shard's output holds
# (0..wanted-1), and the output's Parquet metadata (the adaptive plan, store/plans.py) or None
Finished = tuple[np.ndarray, dict[bytes, bytes] | None]


class Work(Protocol):
    """What the runner consumes (take, returned, finished, pending, positions) and what the
    shard job asks at the end (finish)."""

    @property
    def pending(self) -> int: ...

    @property
    def finished(self) -> bool: ...

    def positions(self) -> list[int]: ...

    def take(self) -> list[Unit]: ...

    def returned(self, pos: int, rollout_index: int, status: str, reward: float | None) -> None: ...

    def finish(self) -> Finished: ...


def _no_check() -> None:
    """Nothing to check at the end."""


class FixedWork:
    """Per task position, the rollout indices to sample, all asked for at once."""

    def __init__(
        self,
        missing: list[list[int]],
        max_n: int,
        wanted: np.ndarray | None = None,
        check: Callable[[], None] = _no_check,
    ):
        """`wanted`: per task the rollouts the output holds (what `finish` returns); `check`:
        what must hold once the work is done (raises otherwise)."""
        self._missing, self._max_n, self._taken = missing, max_n, False
        self._wanted, self._check = wanted, check

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

    def finish(self) -> Finished:
        if self._wanted is None:
            raise ValueError("FixedWork.finish: made without `wanted` (nothing to finish)")
        self._check()
        return self._wanted, None


class RoundsWork:
    """Adaptive rounds task by task (`rounds`: their planner, started on the journal)."""

    def __init__(
        self,
        rounds: TaskRounds,
        max_n: int,
        checked: Callable[[TaskRounds], Finished] | None = None,
    ):
        """`checked`: at the end, the rounds checked against the journal (what `finish`
        returns: the plan's rollouts and metadata)."""
        self.rounds, self._max_n, self._checked = rounds, max_n, checked
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

    def finish(self) -> Finished:
        if self._checked is None:
            raise ValueError("RoundsWork.finish: made without `checked` (nothing to finish)")
        return self._checked(self.rounds)

    def _units(self, asks: list[tuple[int, list[int]]]) -> list[Unit]:
        missing: dict[int, list[int]] = dict(asks)
        units = []
        for pos, indices in missing.items():
            lists = [indices]  # request_units splits one task's indices into requests
            units += [Unit(pos, u.indices) for u in request_units(lists, self._max_n)]
        return units
