"""The rollout job's concurrency loop (stages/rollout/dispatch.py) with a filler: filler units go
only to workers the job's own work leaves idle, never ahead of a unit of the work, and the
filler's units still out are cancelled once the work is done. Each step is released by an
event the test sets, so what is asserted holds on a fast machine and a loaded one alike."""

from __future__ import annotations

import asyncio
import io

from rewardprof.stages.rollout.dispatch import Dispatch
from rewardprof.stages.rollout.progress import Progress
from rewardprof.stages.rollout.shard_tasks import Unit
from rewardprof.stages.rollout.work import FixedWork


class Rounds:
    """A work of two rounds on one task: unit (0, [0]), then, once it returned, (0, [1])."""

    def __init__(self):
        self.asked, self.returned_count = 0, 0

    @property
    def finished(self) -> bool:
        return self.asked == 2 and self.returned_count == 2

    def take(self) -> list[Unit]:
        if self.asked == self.returned_count < 2:
            self.asked += 1
            return [Unit(0, [self.asked - 1])]
        return []


class Engine:
    """run_unit: each unit waits for its own gate; what started, finished, was cancelled."""

    def __init__(self, work):
        self.work, self.gates, self.log = work, {}, []
        self.started = asyncio.Event()

    def gate(self, unit: Unit) -> asyncio.Event:
        return self.gates.setdefault((unit.pos, tuple(unit.indices)), asyncio.Event())

    async def run_unit(self, unit: Unit, work) -> None:
        kind = "work" if work is self.work else "filler"
        self.log.append(("start", kind, unit.pos, unit.indices[0]))
        self.started.set()
        try:
            await self.gate(unit).wait()
        except asyncio.CancelledError:
            self.log.append(("cancelled", kind, unit.pos, unit.indices[0]))
            raise
        self.log.append(("end", kind, unit.pos, unit.indices[0]))
        if isinstance(work, Rounds):
            work.returned_count += 1

    async def until(self, predicate) -> None:
        while not predicate(self.log):
            self.started.clear()
            await self.started.wait()


async def _text(pos: int) -> None:
    return None


def _dispatch(work, engine: Engine, filler, workers: int) -> Dispatch:
    progress = Progress(1, "test", 3600, stream=io.StringIO())
    return Dispatch(work, engine.run_unit, _text, lambda: workers, 2 * workers, progress, filler)


def _started(log, kind):
    return [e[2:] for e in log if e[0] == "start" and e[1] == kind]


def test_filler_takes_only_the_idle_worker_and_is_cancelled_when_the_work_is_done():
    asyncio.run(_filler_takes_only_the_idle_worker_and_is_cancelled_when_the_work_is_done())


async def _filler_takes_only_the_idle_worker_and_is_cancelled_when_the_work_is_done():
    work = Rounds()
    engine = Engine(work)
    filler = FixedWork([[], [], [0], [0], [0], [0]], max_n=1)  # four units, tasks 2-5
    run = asyncio.ensure_future(_dispatch(work, engine, filler, workers=2).run())
    await engine.until(lambda log: _started(log, "filler"))
    for _ in range(20):  # whatever else could start would have by now
        await asyncio.sleep(0)
    # two workers: the work's unit holds one, one filler unit the other, no more
    assert _started(engine.log, "work") == [(0, 0)]
    assert _started(engine.log, "filler") == [(2, 0)]
    engine.gate(Unit(0, [0])).set()  # the work's first round returns
    # its next round goes to the worker just freed, ahead of the filler's other units
    await engine.until(lambda log: (0, 1) in _started(log, "work"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert _started(engine.log, "filler") == [(2, 0)]
    engine.gate(Unit(0, [1])).set()
    await asyncio.wait_for(run, 30)
    # the work is done: the filler's unit still out was cancelled, the rest never asked for
    assert ("cancelled", "filler", 2, 0) in engine.log
    assert _started(engine.log, "filler") == [(2, 0)]
    assert not [e for e in engine.log if e[0] == "end" and e[1] == "filler"]


def test_filler_that_returns_frees_its_worker_for_more_filler():
    asyncio.run(_filler_that_returns_frees_its_worker_for_more_filler())


async def _filler_that_returns_frees_its_worker_for_more_filler():
    work = Rounds()
    engine = Engine(work)
    filler = FixedWork([[0], [0], [0]], max_n=1)
    run = asyncio.ensure_future(_dispatch(work, engine, filler, workers=2).run())
    await engine.until(lambda log: _started(log, "filler"))
    engine.gate(Unit(0, [0])).set()  # filler tasks 0 and the work's task 0 share a gate key
    await engine.until(lambda log: len(_started(log, "filler")) >= 2)
    assert [e[2] for e in engine.log if e[0] == "start" and e[1] == "filler"][:2] == [0, 1]
    engine.gate(Unit(0, [1])).set()
    engine.gate(Unit(1, [0])).set()
    await asyncio.wait_for(run, 30)
    assert ("end", "filler", 0, 0) in engine.log


def test_a_fixed_work_keeps_the_filler_running_until_its_last_unit_returns():
    asyncio.run(_a_fixed_work_keeps_the_filler_running_until_its_last_unit_returns())


async def _a_fixed_work_keeps_the_filler_running_until_its_last_unit_returns():
    work = FixedWork([[0]], max_n=1)  # finished at its one take, its unit still out
    engine = Engine(work)
    filler = FixedWork([[0, 1, 2, 3]], max_n=1)  # task 0 of the filler, four units
    run = asyncio.ensure_future(_dispatch(work, engine, filler, workers=2).run())
    await engine.until(lambda log: _started(log, "filler"))
    assert not run.done()
    engine.gate(Unit(0, [0])).set()  # the work's unit and the filler's first unit return
    await asyncio.wait_for(run, 30)
    assert ("end", "work", 0, 0) in engine.log


def test_without_a_filler_the_loop_ends_as_before():
    asyncio.run(_without_a_filler_the_loop_ends_as_before())


async def _without_a_filler_the_loop_ends_as_before():
    work = Rounds()
    engine = Engine(work)
    run = asyncio.ensure_future(_dispatch(work, engine, None, workers=3).run())
    await engine.until(lambda log: _started(log, "work"))
    engine.gate(Unit(0, [0])).set()
    await engine.until(lambda log: (0, 1) in _started(log, "work"))
    engine.gate(Unit(0, [1])).set()
    await asyncio.wait_for(run, 30)
    assert _started(engine.log, "work") == [(0, 0), (0, 1)]
