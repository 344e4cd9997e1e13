"""Which journaled rollouts count for a set of tasks, and under which task_index.

A journal record counts for a task when its task_id is that task's (re-keyed by task_id if the
tasks table was re-materialized and the task moved), its gen_key matches this run's model and
sampling, and its rollout_index < the task's num_repeats. Per (task_index, rollout_index) the
winner is an ok record if any (else the latest failure); duplicates are never double-counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rewardprof.core.kinds import OK
from rewardprof.store.journal import JournalScan

WINNER_COLUMNS = ["task_index", "rollout_index", "status", "reward", "finished_at", "_src", "_row"]


@dataclass
class Collected:
    winners: pd.DataFrame  # WINNER_COLUMNS + rekeyed; task_index is the resolved one
    stale: int  # records of these tasks from another model/sampling setup
    rekeyed: int  # records whose task moved to a new task_index


def resolve(scan: JournalScan, tasks: pd.DataFrame, gen_key: str) -> Collected:
    """tasks: task_index, task_id, num_repeats of the tasks of interest.

    Vectorized (Arrow hash lookups + one numpy sort): a resuming shard resolves ~1M journal
    records in under a second (docs/benchmarks.md, "resume start")."""
    keys = scan.keys
    empty = Collected(
        keys.select(WINNER_COLUMNS).slice(0, 0).to_pandas().assign(rekeyed=pd.Series(dtype=bool)),
        0,
        0,
    )
    if keys.num_rows == 0 or tasks.empty:
        return empty
    t_index = pa.array(tasks["task_index"].to_numpy(np.int64))
    t_id = pa.array(tasks["task_id"].astype(object).to_numpy(), pa.string())
    # each record's task by task_id: the first task carrying that id (None: not ours)
    by_id = pc.index_in(keys.column("task_id"), value_set=t_id)
    keys = keys.drop_columns(["task_id"])  # not needed past here: do not copy 1M strings
    if by_id.null_count:  # records of other shards' tasks share the journal directory
        mine = pc.is_valid(by_id)
        keys, by_id = keys.filter(mine), by_id.filter(mine)
    if keys.num_rows == 0:
        return empty
    pid = by_id.to_numpy(zero_copy_only=False).astype(np.int64)
    # exact: the record's own task_index is one of ours and carries the same task_id (duplicate
    # rows share a task_id and stay where they were); otherwise it follows its task_id
    pbi = pc.index_in(keys.column("task_index"), value_set=t_index).fill_null(-1)
    pbi = pbi.to_numpy(zero_copy_only=False).astype(np.int64)
    id_class = pc.index_in(t_id, value_set=t_id).to_numpy(zero_copy_only=False)
    exact = (pbi >= 0) & (id_class[np.maximum(pbi, 0)] == pid)
    pos = np.where(exact, pbi, pid)
    fresh = (
        pc.equal(keys.column("gen_key"), gen_key).fill_null(False).to_numpy(zero_copy_only=False)
    )
    stale = int((~fresh).sum())
    ri = keys.column("rollout_index").to_numpy(zero_copy_only=False)
    repeats = tasks["num_repeats"].to_numpy(np.int64)
    keep = np.flatnonzero(fresh & (ri < repeats[pos]))
    ok = pc.equal(keys.column("status"), OK).fill_null(False).to_numpy(zero_copy_only=False)[keep]
    finished = (
        keys.column("finished_at")
        .cast(pa.float64())
        .fill_null(np.nan)
        .to_numpy(zero_copy_only=False)[keep]
    )
    pick = keep[_winners(pos[keep], ri[keep], ok, finished)]
    # only what callers use (task_id strings of ~1M records are most of the cost otherwise)
    winners = keys.select(WINNER_COLUMNS).take(pa.array(pick)).to_pandas()
    winners["task_index"] = t_index.to_numpy()[pos[pick]]
    winners["rekeyed"] = ~exact[pick]
    return Collected(winners, stale, int(winners["rekeyed"].sum()))


def _winners(pos: np.ndarray, ri: np.ndarray, ok: np.ndarray, finished: np.ndarray) -> np.ndarray:
    """Per (pos, ri), the position of its winner: an ok record if any, then the latest
    finished; ties keep scan order. A journal is nearly sorted by (task, rollout) and almost
    every pair has one record, so a stable sort on one int64 key (~15 ms for 1M records; a
    four-key lexsort took ~600 ms) does most of it and only duplicated pairs get the full
    ordering. Returned in (pos, ri) order."""
    if not len(pos):
        return np.zeros(0, dtype=np.int64)
    pair = pos * (int(ri.max()) + 1) + ri
    order = np.argsort(pair, kind="stable")
    sorted_pair = pair[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = sorted_pair[1:] != sorted_pair[:-1]
    group = np.cumsum(starts) - 1
    sizes = np.bincount(group)
    single = sizes[group] == 1
    picks = order[starts & single]
    dup = order[~single]  # scan order within a pair (the sort is stable)
    if len(dup):
        sub = np.lexsort((-finished[dup], ~ok[dup], pair[dup]))
        d_pair = pair[dup][sub]
        first = np.ones(len(sub), dtype=bool)
        first[1:] = d_pair[1:] != d_pair[:-1]
        picks = np.concatenate([picks, dup[sub[first]]])
    return picks[np.argsort(pair[picks], kind="stable")]
