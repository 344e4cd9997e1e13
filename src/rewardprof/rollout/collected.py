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

from rewardprof.records import OK
from rewardprof.rollout.journal import JournalScan


@dataclass
class Collected:
    winners: pd.DataFrame  # task_index, rollout_index, task_id, status, _src, _row, rekeyed
    stale: int  # records of these tasks from another model/sampling setup
    rekeyed: int  # records whose task moved to a new task_index


def resolve(scan: JournalScan, tasks: pd.DataFrame, gen_key: str) -> Collected:
    """tasks: task_index, task_id, num_repeats of the tasks of interest."""
    keys = scan.keys.to_pandas()
    empty = Collected(keys.iloc[0:0].assign(rekeyed=pd.Series(dtype=bool)), 0, 0)
    if keys.empty or tasks.empty:
        return empty
    keys = keys[keys["task_id"].isin(set(tasks["task_id"]))]
    if keys.empty:
        return empty
    # Exact matches first; a record whose task moved follows its task_id to the first task
    # carrying it (duplicate rows share a task_id and stay where they were when still there).
    exact_ids = pd.MultiIndex.from_frame(tasks[["task_index", "task_id"]])
    is_exact = pd.MultiIndex.from_frame(keys[["task_index", "task_id"]]).isin(exact_ids)
    moved = keys[~is_exact]
    first_index = tasks.drop_duplicates("task_id").set_index("task_id")["task_index"]
    rekeyed = moved.assign(task_index=moved["task_id"].map(first_index).astype("int64"))
    keys = pd.concat([keys[is_exact].assign(rekeyed=False), rekeyed.assign(rekeyed=True)])
    stale_mask = keys["gen_key"] != gen_key
    stale = int(stale_mask.sum())
    keys = keys[~stale_mask]
    repeats = tasks.set_index("task_index")["num_repeats"]
    keys = keys[keys["rollout_index"].to_numpy() < keys["task_index"].map(repeats).to_numpy()]
    keys = keys.assign(_ok=(keys["status"] == OK).astype(np.int8))
    keys = keys.sort_values(["_ok", "finished_at"], ascending=[False, False], kind="stable")
    winners = keys.drop_duplicates(["task_index", "rollout_index"], keep="first")
    return Collected(winners.drop(columns="_ok"), stale, int(winners["rekeyed"].sum()))
