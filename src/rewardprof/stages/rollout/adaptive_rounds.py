"""Adaptive sampling in the rollout stage: rounds planned by core/adaptive_plan.py.

A shard's job plans from its journal, samples what the plan is missing, and plans again, until
every task's decision is settled or it has num_repeats rollouts. The plan is a function of the
rewards alone (never of arrival order, shard split or concurrency), so a killed job's rerun,
which replans from the journal, samples the same (task, rollout) pairs. Failures: a rollout
that failed in this job is known (the plan treats it as unknown reward, it is not retried in a
loop); one that failed in an earlier attempt is retried, as in a fixed-K run.

The plan is recorded in the shard output's Parquet metadata (PLAN_KEY: task_index, planned,
stopped_early, keep per task), so merge, check and profile know how many rollouts a task
stopped at without the config.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.adaptive_plan import AdaptiveSettings, Plan, Records, plan
from rewardprof.core.config import Config
from rewardprof.core.schemas import OK
from rewardprof.stages.rollout.collected import resolve
from rewardprof.stages.rollout.journal import scan_journal

PLAN_KEY = b"rewardprof.adaptive_plan"


def settings_of(cfg: Config) -> AdaptiveSettings | None:
    """The planner's settings, None when adaptive sampling is off."""
    a = cfg.adaptive
    if a.mode == "off":
        return None
    return AdaptiveSettings(
        mode=a.mode,
        first=a.round_size if a.mode == "exact" else a.min_rollouts,
        round_size=a.round_size,
        delta=a.delta,
        group_size=cfg.profile.group_size,
        ci_level=cfg.profile.ci_level,
        signal_threshold=cfg.profile.signal_threshold,
    )


def shard_plan(
    cfg: Config,
    settings: AdaptiveSettings,
    tasks: pd.DataFrame,
    journal_dir: Path,
    gen_key: str,
    failed_here: set[tuple[int, int]],
) -> tuple[Plan, Records]:
    """The plan of the shard's tasks from the journal; `failed_here`: (task_index,
    rollout_index) that failed in this job (known); other failures are left to retry."""
    col = resolve(
        scan_journal(journal_dir), tasks[["task_index", "task_id", "num_repeats"]], gen_key
    )
    w = col.winners
    ok = (w["status"] == OK).to_numpy()
    ti = w["task_index"].to_numpy(np.int64)
    ri = w["rollout_index"].to_numpy(np.int64)
    here = np.array([(int(a), int(b)) in failed_here for a, b in zip(ti, ri, strict=True)], bool)
    known = ok | here
    pos = pd.Index(tasks["task_index"]).get_indexer(ti[known])
    reward = np.where(ok[known], w["reward"].to_numpy(dtype=float, na_value=np.nan)[known], np.nan)
    records = Records(pos.astype(np.int64), ri[known], reward)
    result = plan(
        settings,
        cfg.export,
        tasks["num_repeats"].to_numpy(np.int64),
        tasks["label"].to_numpy(dtype=object),
        records,
        None,
        cfg.profile.pass_threshold,
    )
    return result, records


def generate_rounds(run, settings: AdaptiveSettings, generate) -> tuple[Plan, int]:
    """Plan, sample what is missing (`generate(per-task index lists)` returns how many it
    sent), replan, until nothing is missing; (the final plan, rollouts sent). `run` is the
    shard's ShardRun; each round writes under its own journal writer id (a writer's segment
    numbers restart at 0, so reusing one would overwrite its first segment)."""
    base, sent, previous = run.writer_id, 0, None
    for round_no in itertools.count():
        plan_, records = shard_plan(
            run.cfg, settings, run.tasks, run.journal_dir, run.gen_key, run.failed_here
        )
        todo = missing_lists(plan_, records)
        if not any(todo):
            return plan_, sent
        if todo == previous:  # what was sampled did not reach the journal: never loop on it
            raise RuntimeError(f"{base}: round {round_no} asks again for the same rollouts")
        run.writer_id, previous = f"{base}-r{round_no}", todo
        sent += generate(todo)
    raise AssertionError("unreachable")


def missing_lists(plan_: Plan, records: Records) -> list[list[int]]:
    """Per task position, the planned rollout indices still to sample."""
    pos, idx = plan_.missing(records)
    out: list[list[int]] = [[] for _ in range(len(plan_.planned))]
    for p, r in zip(pos.tolist(), idx.tolist(), strict=True):
        out[p].append(r)
    return out


def plan_metadata(tasks: pd.DataFrame, plan_: Plan) -> dict[bytes, bytes]:
    """The plan as Parquet key-value metadata of the shard output."""
    body = {
        "task_index": tasks["task_index"].astype(int).tolist(),
        "planned": plan_.planned.astype(int).tolist(),
        "stopped_early": plan_.stopped_early.astype(bool).tolist(),
        "keep": plan_.keep.astype(bool).tolist(),
    }
    return {PLAN_KEY: json.dumps(body, separators=(",", ":")).encode()}


def read_plans(paths: list[Path]) -> pd.DataFrame | None:
    """task_index, planned, stopped_early, keep from the shard outputs (or the files of a
    merged dataset); None when they were made without adaptive sampling."""
    parts = []
    for path in paths:
        meta = pq.read_schema(path).metadata or {}
        if PLAN_KEY in meta:
            parts.append(pd.DataFrame(json.loads(meta[PLAN_KEY])))
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True).sort_values("task_index", ignore_index=True)
