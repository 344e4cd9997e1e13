"""The rollout job's concurrency: a fixed pool of workers (with several replicas: as many as they
admit, growing with the fleet) pulls request units from a bounded queue, never one coroutine per
rollout, so memory stays flat however large the shard. A feed fills the queue from the shard's
work (work.py: `take` the units due now, `finished` when nothing more will come) and, when the
work has nothing due, waits for a unit to return: each result may make the work ask for more
(adaptive rounds) while others are still out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from rewardprof.stages.rollout.progress import Progress
from rewardprof.stages.rollout.shard_tasks import Unit


class Feedable(Protocol):
    """The side of a shard's work (work.py) the feed reads; each unit's results reach it
    through the journaling (records.Journaling), before its worker takes the next."""

    @property
    def finished(self) -> bool: ...

    def take(self) -> list[Unit]: ...


class SamplingLoop:
    """Every unit `work` asks for, sampled by `sample_unit` in workers (`concurrency` at least,
        more as `admission` allows), `prepare` awaited with a unit's task position before the unit
    is queued (its task's text)."""

    def __init__(
        self,
        work: Feedable,
        sample_unit: Callable[[Unit], Awaitable[None]],
        prepare: Callable[[int], Awaitable[None]],
        progress: Progress,
        concurrency: int,
        admission: Callable[[], int],
    ):
        self._work, self._sample_unit, self._prepare = work, sample_unit, prepare
        self._progress, self._concurrency, self._admission = progress, concurrency, admission
        self._queue: asyncio.Queue[Unit | None] = asyncio.Queue(maxsize=2 * concurrency)
        self._returned = asyncio.Event()  # a unit finished: the work may ask for more
        self._workers: list[asyncio.Task] = []

    async def run(self) -> None:
        """Until the work is finished and every unit has returned; the workers are cancelled
        if it stops early (an error, the endpoint down, SIGTERM)."""
        self._hire(self._concurrency)
        try:
            await self._feed()
        finally:
            for task in self._workers:
                task.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)

    def _hire(self, want: int) -> None:
        self._workers.extend(
            asyncio.create_task(self._worker()) for _ in range(want - len(self._workers))
        )

    async def _worker(self) -> None:
        while (unit := await self._queue.get()) is not None:
            await self._sample_unit(unit)
            self._returned.set()

    async def _feed(self) -> None:
        taken = 0
        while True:
            units = self._work.take()
            count = sum(len(u.indices) for u in units)
            if taken:  # the first take is the total `progress` started with
                self._progress.add(count)
            taken += count
            for unit in units:
                # a worker per sequence the replicas admit, at least
                self._hire(max(self._concurrency, self._admission()))
                await self._prepare(unit.pos)
                await self._queue.put(unit)
            if self._work.finished:
                break
            if not units:
                await self._returned.wait()  # set by a worker since the last take
                self._returned.clear()
        for _ in self._workers:
            await self._queue.put(None)
        await asyncio.gather(*self._workers)
