"""Adaptive sampling in a shard's job: the rounds planned by decisions/planning/round_plan.py, as
the shard job's Work (work.py), started from one read of the journal (ShardJournal).

A shard's job plans from its journal, samples what the plan is missing, and plans each task
again as soon as its own rollouts returned (decisions/planning/task_rounds.py: no barrier between
the shard's tasks), until every task's decision is settled or it has num_repeats rollouts. The plan
is a function of the rewards alone (never of arrival order, shard split or concurrency), so a
killed job's rerun, which replans from the journal, samples the same (task, rollout) pairs, and
at the end the round-synchronous plan on the journal must be the rounds' plan (checked_plan).
Failures: a rollout that failed in this job is known (the plan treats it as unknown reward, it
is not retried in a loop); one that failed in an earlier attempt is retried, as in a fixed-K
run. The plan is recorded in the shard output's Parquet metadata (store/plans.py).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rewardprof.core.config import MAX_NUM_REPEATS, Config
from rewardprof.core.kinds import OK
from rewardprof.decisions.audit.sample import audit_of
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Plan, Records, plan
from rewardprof.decisions.planning.task_rounds import TaskRounds
from rewardprof.decisions.priors.warm_start import prior_keys_of
from rewardprof.stages.adaptive_settings import first_round_settings, settings_of
from rewardprof.stages.rollout.runner import ShardRun
from rewardprof.stages.rollout.shard_tasks import missing_indices
from rewardprof.stages.rollout.work import Finished, FixedWork, RoundsWork, Work
from rewardprof.store import plans
from rewardprof.store.collected import resolve
from rewardprof.store.journal import scan_journal


class ShardJournal:
    """One read of the journal for a shard's tasks: every view the job starts from (what is
    missing, what the rounds know, the first round's winners, the counts it logs) comes from
    this one scan."""

    def __init__(self, tasks: pd.DataFrame, journal_dir: Path, gen_key: str):
        self.tasks, self.gen_key = tasks, gen_key
        self.scan = scan_journal(journal_dir)
        self.collected = resolve(
            self.scan, tasks[["task_index", "task_id", "num_repeats"]], gen_key
        )

    def winners(self, wanted: np.ndarray | None = None) -> pd.DataFrame:
        """The journal's record of each (task, rollout index < wanted, default num_repeats)."""
        if wanted is None:
            return self.collected.winners
        cols = self.tasks[["task_index", "task_id"]].assign(num_repeats=wanted)
        return resolve(self.scan, cols, self.gen_key).winners

    def missing(self, wanted: np.ndarray | None = None) -> list[list[int]]:
        """Per task position, the rollout indices < wanted without an ok record."""
        winners = self.winners(wanted)
        return missing_indices(self.tasks, winners[winners["status"] == OK], wanted)

    def info(self) -> dict[str, int]:
        """What the job logs and its heartbeat carries about the journal it started from."""
        col = self.collected
        return {
            "journaled_ok": int((col.winners["status"] == OK).sum()),
            "stale": col.stale,
            "rekeyed": col.rekeyed,
            "torn_lines": self.scan.torn_lines,
        }

    def records(self, failed_here: set[tuple[int, int]]) -> Records:
        """The known results of the shard's tasks: their ok rollouts and those that failed in
        this job (`failed_here`: (task_index, rollout_index)); other failures are left to
        retry."""
        w, tasks = self.collected.winners, self.tasks
        ok = (w["status"] == OK).to_numpy()
        ti = w["task_index"].to_numpy(np.int64)
        ri = w["rollout_index"].to_numpy(np.int64)
        failed_keys = np.array([a * MAX_NUM_REPEATS + b for a, b in failed_here], dtype=np.int64)
        here = np.isin(ti * MAX_NUM_REPEATS + ri, failed_keys)
        known = ok | here
        pos = pd.Index(tasks["task_index"]).get_indexer(ti[known])
        reward = w["reward"].to_numpy(dtype=float, na_value=np.nan)[known]
        return Records(pos.astype(np.int64), ri[known], np.where(ok[known], reward, np.nan))


def shard_work(cfg: Config, run: ShardRun, view: ShardJournal, priors=None) -> Work:
    """The shard job's work: every missing rollout (fixed K), or the adaptive rounds started
    from the journal, checked against it at the end (the plan in the output's metadata)."""
    wanted = run.tasks["num_repeats"].to_numpy(np.int64)
    settings = settings_of(cfg)
    if settings is None:
        return FixedWork(view.missing(), cfg.engine.max_n, wanted)
    rounds = TaskRounds(
        settings, cfg.export, records=view.records(set()), **_plan_inputs(cfg, run.tasks, priors)
    )
    checked = functools.partial(checked_plan, run, settings, priors=priors)
    return RoundsWork(rounds, cfg.engine.max_n, checked)


def first_round_work(cfg: Config, run: ShardRun, view: ShardJournal) -> Work:
    """bayes' first round: exact's rounds until each task is settled or has
    adaptive.min_rollouts (at most K), or every task's first min_rollouts with posterior keep
    rules; at the end the journal must hold it all."""
    wanted = np.minimum(cfg.adaptive.min_rollouts, run.tasks["num_repeats"].to_numpy(np.int64))
    phase = first_round_settings(cfg)
    if phase is None:  # every task's first min_rollouts

        def journaled() -> None:
            present = len(ShardJournal(run.tasks, run.journal_dir, run.gen_key).winners(wanted))
            if present != int(wanted.sum()):
                raise RuntimeError(
                    f"{run.shard_tag}: first round incomplete: {present} of "
                    f"{int(wanted.sum())} rollouts journaled"
                )

        return FixedWork(view.missing(wanted), cfg.engine.max_n, wanted, journaled)
    rounds = TaskRounds(
        phase, cfg.export, records=view.records(set()), **_plan_inputs(cfg, run.tasks, None)
    )

    def planned(_: TaskRounds) -> Finished:  # the plan on the journal asks for nothing more
        plan_, records = shard_plan(run, phase)
        if any(missing_lists(plan_, records)):
            raise RuntimeError(f"{run.shard_tag}: first round incomplete: planned rollouts missing")
        return wanted, None

    return RoundsWork(rounds, cfg.engine.max_n, planned)


def _plan_inputs(cfg: Config, tasks: pd.DataFrame, priors) -> dict[str, Any]:
    labels = tasks["label"].to_numpy(dtype=object)
    return {
        "num_repeats": tasks["num_repeats"].to_numpy(np.int64),
        "labels": labels,
        "priors": priors,
        "pass_threshold": cfg.profile.pass_threshold,
        "audit": audit_of(tasks["task_id"].to_numpy(dtype=object), labels, priors),
        "prior_keys": prior_keys_of(tasks["task_id"], labels, priors),
    }


def shard_plan(run: ShardRun, settings: AdaptiveSettings, priors=None) -> tuple[Plan, Records]:
    """The round-synchronous plan of the shard's tasks on the journal as it is now."""
    records = ShardJournal(run.tasks, run.journal_dir, run.gen_key).records(run.failed_here)
    inputs = _plan_inputs(run.cfg, run.tasks, priors)
    return plan(settings, run.cfg.export, records=records, **inputs), records


def checked_plan(
    run: ShardRun, settings: AdaptiveSettings, rounds: TaskRounds, priors=None
) -> Finished:
    """The round-synchronous plan on the journal once the rounds are finished: it asks for
    nothing more and is the rounds' plan, task by task; its rollouts and the output's
    metadata that records it."""
    plan_, records = shard_plan(run, settings, priors)
    if any(missing_lists(plan_, records)):  # what was sampled did not reach the journal
        raise RuntimeError(f"{run.shard_tag}: planned rollouts missing from the journal")
    mine = rounds.result()
    for field in ("planned", "done", "keep"):
        if not np.array_equal(getattr(plan_, field), getattr(mine, field)):
            raise RuntimeError(f"{run.shard_tag}: the rounds' {field} differ from the plan's")
    metadata = plans.plan_metadata(
        run.tasks["task_index"].to_numpy(), plan_.planned, plan_.stopped_early, plan_.keep
    )
    return plan_.planned, metadata


def missing_lists(plan_: Plan, records: Records) -> list[list[int]]:
    """Per task position, the planned rollout indices still to sample."""
    pos, idx = plan_.missing(records)
    out: list[list[int]] = [[] for _ in range(len(plan_.planned))]
    for p, r in zip(pos.tolist(), idx.tolist(), strict=True):
        out[p].append(r)
    return out
