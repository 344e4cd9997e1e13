"""The concurrency loop of a shard's job: a pool of workers pulls request units from a bounded
queue that `run` feeds from the job's work (work.py), asking the work again whenever a result
came back (adaptive rounds ask for more while others are still out).

`filler`: work that may only use slots the job's own work leaves idle (bayes' first-round job:
the first round of the tasks outside the prior sample, decisions/prior_sample.py). A filler
unit is queued only for a worker that is idle now, one at a time, so a unit of the work never
waits behind one; once the work is finished the filler stops, its requests still in flight
cancelled (the engine aborts them), and the job ends: whatever of it finished is journaled,
the rest is asked for again by the job that needs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from rewardprof.stages.rollout.progress import Progress
from rewardprof.stages.rollout.shard_tasks import Unit


class Work(Protocol):
    """What work.py's FixedWork and RoundsWork offer the loop."""

    @property
    def finished(self) -> bool: ...

    def take(self) -> list[Unit]: ...


class Dispatch:
    """Feeds `work` (and `filler`) to workers that call `run_unit(unit, its work)`;
    `read_text(pos)` is awaited before a unit is queued; `wanted_workers()`: how many workers
    the endpoints admit now (the pool grows to it, never shrinks)."""

    def __init__(
        self,
        work: Work,
        run_unit: Callable[[Unit, Work], Awaitable[None]],
        read_text: Callable[[int], Awaitable[None]],
        wanted_workers: Callable[[], int],
        queue_size: int,
        progress: Progress,
        filler: Work | None = None,
    ):
        self._work, self._filler = work, filler
        self._run_unit, self._read_text = run_unit, read_text
        self._wanted, self._progress = wanted_workers, progress
        self._queue: asyncio.Queue[tuple[Unit, Work] | None] = asyncio.Queue(maxsize=queue_size)
        # a unit finished (the work may ask for more) or a worker went idle (room for filler)
        self._wake = asyncio.Event()
        self.workers: list[asyncio.Task] = []
        self._idle = 0  # workers waiting on the queue
        self._open = 0  # units of the work queued or running
        self._spare: list[Unit] = []  # filler units taken from the filler, not queued yet
        self._filling: set[asyncio.Task] = set()
        self._filler_stopped = filler is None

    async def run(self) -> None:
        """Until the work is finished (then the filler is stopped and the workers end)."""
        self._staff()
        taken = 0
        while True:
            units = self._work.take()
            count = sum(len(u.indices) for u in units)
            if taken:  # the first take is the total `progress` started with
                self._progress.add(count)
            taken += count
            for unit in units:
                self._open += 1
                await self._put(unit, self._work)
            # with a filler, the work is done once nothing of it is out (a FixedWork is
            # finished at its one take): the filler runs until then
            if self._work.finished and (self._filler_stopped or not self._open):
                break
            if not units:
                await self._fill()
                await self._wake.wait()  # set by a worker since the last take
                self._wake.clear()
        self._stop_filler()
        for _ in self.workers:
            await self._queue.put(None)
        await asyncio.gather(*self.workers)

    async def _put(self, unit: Unit, work: Work) -> None:
        self._staff()
        await self._read_text(unit.pos)
        await self._queue.put((unit, work))

    def _staff(self) -> None:
        want = self._wanted()
        self.workers.extend(
            asyncio.create_task(self._worker()) for _ in range(want - len(self.workers))
        )

    async def _fill(self) -> None:
        """One filler unit per worker idle now (the work has nothing to send)."""
        while not self._filler_stopped and self._idle > self._queue.qsize():
            if not self._spare:
                self._spare = self._filler.take()[::-1]  # popped from the end: in order
                if not self._spare:
                    return  # the filler waits on its own results
            unit = self._spare.pop()
            self._progress.add(len(unit.indices))
            await self._put(unit, self._filler)

    def _stop_filler(self) -> None:
        self._filler_stopped = True
        for job in self._filling:
            job.cancel()

    async def _worker(self) -> None:
        while True:
            if not self._filler_stopped and self._queue.empty():
                self._wake.set()  # idle with nothing queued: room for a filler unit
            self._idle += 1
            try:
                item = await self._queue.get()
            finally:
                self._idle -= 1
            if item is None:
                return
            unit, work = item
            if work is self._work:
                await self._run_unit(unit, work)
                self._open -= 1
            elif not self._filler_stopped:
                await self._run_filler(unit, work)
            self._wake.set()

    async def _run_filler(self, unit: Unit, work: Work) -> None:
        job = asyncio.ensure_future(self._run_unit(unit, work))
        self._filling.add(job)
        try:
            await job
        except asyncio.CancelledError:
            # the filler stopped (its unit cancelled, not this worker): go on to the end
            if asyncio.current_task().cancelling() or not self._filler_stopped:
                raise
        finally:
            self._filling.discard(job)
