"""A shard's rollout job: hold the shard's lock, read what the journal has, sample what the
shard's work asks for (the engine opened at the first rollout to generate, closed before the
output is written), then write the shard's output.

- run_shard: every rollout of the shard's tasks (fixed K), or adaptive rounds planned task by
  task (work.RoundsWork), recorded in the output's metadata;
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
from rewardprof.stages.rollout.adaptive_rounds import (
    checked_plan,
    first_round_settings,
    missing_lists,
    plan_metadata,
    settings_of,
    shard_plan,
    shard_rounds,
)
from rewardprof.stages.rollout.heartbeat import ShardHeartbeat
from rewardprof.stages.rollout.output import remove_stale_tmp, write_output
from rewardprof.stages.rollout.progress import Progress, log_done, log_start
from rewardprof.stages.rollout.runner import ShardRun, Work, with_sigterm
from rewardprof.stages.rollout.shard_tasks import load_tasks, missing_indices
from rewardprof.stages.rollout.work import FixedWork, RoundsWork
from rewardprof.store.collected import resolve
from rewardprof.store.journal import ShardLock, scan_journal
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
    num_repeats each; adaptive: each task's planned rollouts, the plan in the metadata).
    `priors`: adaptive bayes' labels' priors; `heartbeat`, if any, is kept up to date for
    `rewardprof status`."""
    cfg = job.cfg
    with _open_shard(job, engine) as run:
        missing, info = run.missing()
        settings = settings_of(cfg)
        work: Work = FixedWork(missing, cfg.engine.max_n)
        if settings is not None:  # adaptive_rounds.py
            rounds = shard_rounds(cfg, settings, run.tasks, job.journal, run.gen_key, priors)
            work = RoundsWork(rounds, cfg.engine.max_n)
        log_start(job.tag, len(run.tasks), work.pending, info)
        if heartbeat is not None:
            expected = int(run.tasks["num_repeats"].sum())
            heartbeat.data.update(expected=expected, gen_key=run.gen_key, **info)
        generated = _sample(run, engine, work, heartbeat)
        wanted, metadata = run.tasks["num_repeats"].to_numpy(np.int64), None
        if isinstance(work, RoundsWork):
            plan_ = checked_plan(run, settings, work.rounds, priors)
            wanted, metadata = plan_.planned, plan_metadata(run.tasks, plan_)
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
    first = cfg.adaptive.min_rollouts
    phase = first_round_settings(cfg)
    with _open_shard(job, engine, phase=FIRST_ROUND) as run:
        wanted = np.minimum(first, run.tasks["num_repeats"].to_numpy(np.int64))
        winners = _first_round_winners(run, wanted)
        work: Work
        if phase is None:  # every task's first min_rollouts
            missing = missing_indices(run.tasks, winners[winners["status"] == OK], wanted)
            work = FixedWork(missing, cfg.engine.max_n)
        else:  # exact's rounds, up to min_rollouts
            rounds = shard_rounds(cfg, phase, run.tasks, job.journal, run.gen_key)
            work = RoundsWork(rounds, cfg.engine.max_n)
        if heartbeat is not None:  # done/expected (at most) and the ETA are the first round's
            journaled = int((winners["status"] == OK).sum())
            heartbeat.data.update(expected=int(wanted.sum()), journaled_ok=journaled)
            heartbeat.data["gen_key"] = run.gen_key
        sent = _sample(run, engine, work, heartbeat)
        winners = _first_round_winners(run, wanted)
        summary = {
            "shard": job.tag,
            "tasks": len(run.tasks),
            "first_round": first,
            "generated": sent,
            "present": len(winners),
            "ok": int((winners["status"] == OK).sum()),
        }
        if phase is None:
            incomplete = summary["present"] != int(wanted.sum())
        else:  # the plan on the journal asks for nothing more
            plan_, records = shard_plan(
                cfg, phase, run.tasks, run.journal_dir, run.gen_key, run.failed_here
            )
            incomplete = any(missing_lists(plan_, records))
        if incomplete:
            raise RuntimeError(f"{job.tag}: first round incomplete: {summary}")
        write_json_atomic(job.out, summary)
        return summary


def _first_round_winners(run: ShardRun, wanted: np.ndarray):
    # the resolver's num_repeats: how many rollouts of each task count
    tasks = run.tasks[["task_index", "task_id"]].assign(num_repeats=wanted)
    return resolve(scan_journal(run.journal_dir), tasks, run.gen_key).winners


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
