"""A shard's rollout job: hold the shard's lock, read what the journal has, sample what the
shard's work asks for (the engine opened at the first rollout to generate, closed before the
output is written), then write the shard's output.

- run_shard: the shard's work (work.py, made by rounds.py: every rollout of the shard's tasks
  at fixed K, or adaptive rounds planned task by task), then the output the work's `finish`
  asks for;
- run_first_round: adaptive bayes' first step, every task's rollouts below
  adaptive.min_rollouts, and a summary saying the shard's first round is journaled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import Config
from rewardprof.core.kinds import OK
from rewardprof.engine.session import Endpoint
from rewardprof.stages.rollout.heartbeat import ShardHeartbeat
from rewardprof.stages.rollout.output import remove_stale_tmp, write_output
from rewardprof.stages.rollout.progress import Progress, log_done, log_start
from rewardprof.stages.rollout.rounds import ShardJournal, first_round_work, shard_work
from rewardprof.stages.rollout.runner import ShardRun, with_sigterm
from rewardprof.stages.rollout.shard_tasks import load_tasks
from rewardprof.stages.rollout.work import Work
from rewardprof.store.journal import ShardLock
from rewardprof.store.shards import FIRST_ROUND


@dataclass(frozen=True)
class EngineOpener:
    """The engine of a shard's job: `model`, the name its requests carry (gen_key needs it
    before any engine starts), and `open`, what starts or connects to the engine, called at
    the first rollout to generate (a shard with everything journaled never starts one)."""

    model: str
    open: Callable[[], AbstractContextManager[Endpoint]]

    @classmethod
    def running(cls, endpoint: Endpoint) -> EngineOpener:
        """An endpoint that is already there."""
        return cls(endpoint.model, lambda: contextlib.nullcontext(endpoint))


@dataclass(frozen=True)
class ShardJob:
    """One shard's job: the run's config, the shard's tasks file, the journal directory
    (shared by every shard), the output to write, the shard's tag (`<i>-of-<N>`)."""

    cfg: Config
    tasks: Path
    journal: Path
    out: Path
    tag: str

    def __post_init__(self) -> None:
        for name in ("tasks", "journal", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))


def run_shard(
    job: ShardJob,
    engine: EngineOpener,
    priors: dict | None = None,
    heartbeat: ShardHeartbeat | None = None,
) -> dict[str, Any]:
    """Collect every rollout the shard's tasks need, then write the shard output (fixed K:
    num_repeats each; adaptive: each task's planned rollouts, the plan in the metadata: the
    work's `finish`). `priors`: adaptive bayes' labels' priors; `heartbeat`, if any, is kept up
    to date for `rewardprof status`."""
    cfg = job.cfg
    with _open_shard(job, engine) as run:
        view = ShardJournal(run.tasks, job.journal, run.gen_key)
        info = view.info()
        work = shard_work(cfg, run, view, priors)
        log_start(job.tag, len(run.tasks), work.pending, info)
        if heartbeat is not None:
            expected = int(run.tasks["num_repeats"].sum())
            heartbeat.data.update(expected=expected, gen_key=run.gen_key, **info)
        generated = _sample(run, engine, work, heartbeat)
        wanted, metadata = work.finish()
        summary = write_output(
            cfg, run.tasks, wanted, job.journal, run.gen_key, job.tag, job.out, metadata
        )
        summary.update(generated=generated, **info)
        log_done(job.tag, summary)
        return summary


def run_first_round(
    job: ShardJob, engine: EngineOpener, heartbeat: ShardHeartbeat | None = None
) -> dict[str, Any]:
    """bayes' first step in a shard: exact's rounds until each task is settled or has
    adaptive.min_rollouts (at most K; every task's first min_rollouts with posterior keep
    rules), then a summary at job.out saying the shard's first round is journaled."""
    cfg = job.cfg
    with _open_shard(job, engine, phase=FIRST_ROUND) as run:
        view = ShardJournal(run.tasks, job.journal, run.gen_key)
        work = first_round_work(cfg, run, view)
        if heartbeat is not None:  # done/expected (at most) and the ETA are the first round's
            wanted = np.minimum(cfg.adaptive.min_rollouts, run.tasks["num_repeats"].to_numpy())
            journaled = int((view.winners(wanted)["status"] == OK).sum())
            heartbeat.data.update(expected=int(wanted.sum()), journaled_ok=journaled)
            heartbeat.data["gen_key"] = run.gen_key
        sent = _sample(run, engine, work, heartbeat)
        wanted, _ = work.finish()  # raises if the journal lacks some of it
        winners = ShardJournal(run.tasks, job.journal, run.gen_key).winners(wanted)
        summary = {
            "shard": job.tag,
            "tasks": len(run.tasks),
            "first_round": cfg.adaptive.min_rollouts,
            "generated": sent,
            "present": len(winners),
            "ok": int((winners["status"] == OK).sum()),
        }
        write_json_atomic(job.out, summary)
        return summary


@contextlib.contextmanager
def _open_shard(job: ShardJob, engine: EngineOpener, phase: str = "") -> Iterator[ShardRun]:
    """The shard's run, its lock held (one job per shard) and a killed attempt's temp files
    gone."""
    with ShardLock(job.journal, job.tag):
        remove_stale_tmp(job.journal, job.tag, job.out)
        tasks = load_tasks(job.tasks)
        yield ShardRun(
            job.cfg, engine.model, tasks, job.journal, job.tag, tasks_path=job.tasks, phase=phase
        )


def _sample(
    run: ShardRun, engine: EngineOpener, work: Work, heartbeat: ShardHeartbeat | None
) -> int:
    """Everything `work` asks for, the engine open meanwhile (nothing asked at the start:
    no engine); the number of rollouts asked for."""
    if not work.pending:
        return 0
    interval = run.cfg.rollout.progress_interval_s
    with engine.open() as endpoint:
        progress = Progress(work.pending, run.shard_tag, interval, heartbeat=heartbeat)
        try:
            asyncio.run(with_sigterm(run.generate(endpoint, work, progress)))
        finally:
            progress.close()
    return progress.total
