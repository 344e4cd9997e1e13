"""merge: the shard outputs become one Parquet dataset, `rollouts.parquet/`, checked whole.

At sweep scale the shards hold tens of GB of completion text, so the dataset directory links
the shard files (hard links; a copy only across filesystems) instead of rewriting them. The check
reads key columns only: every rollout is in the shard that owns its task, no duplicate
(task_index, rollout_index), every task_id matches its task, and nothing expected is missing.
Journal records whose task is no longer in the tasks table are reported as orphaned (kept).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path, write_json_atomic
from rewardprof.core.errors import RewardprofError
from rewardprof.core.kinds import OK
from rewardprof.stages import MergePaths
from rewardprof.store.journal import scan_journal
from rewardprof.store.plans import read_plans
from rewardprof.store.shards import shard_of

if TYPE_CHECKING:
    from rewardprof.core.config import Config


class MergeError(RewardprofError, RuntimeError):
    """The shard outputs do not make one complete, consistent dataset."""


def _check_shard(
    path: Path, shard_index: int, num_shards: int, tasks: pd.DataFrame
) -> pd.DataFrame:
    keys = pq.read_table(
        path, columns=["task_index", "rollout_index", "task_id", "status"]
    ).to_pandas()
    wrong_shard = keys[shard_of(keys["task_index"], num_shards) != shard_index]
    if len(wrong_shard):
        raise MergeError(
            f"{path}: {len(wrong_shard)} rollouts belong to another shard "
            f"(first task_index {int(wrong_shard['task_index'].iloc[0])}); "
            f"delete this stale shard file and rerun its rollout job"
        )
    expected_id = keys["task_index"].map(tasks["task_id"])
    bad = keys[expected_id != keys["task_id"]]
    if len(bad):
        raise MergeError(
            f"{path}: {len(bad)} rollouts carry a task_id that does not match "
            f"their task (first task_index {int(bad['task_index'].iloc[0])}); "
            f"the tasks table changed after this shard was written: rerun it"
        )
    return keys


class MergeAdaptive(TypedDict):
    tasks_stopped_early: int
    rollouts_not_sampled: int


class MergeReport(TypedDict):
    num_rollouts: int
    num_ok: int
    by_status: dict[str, int]
    by_label: dict[str, dict[str, int]]
    orphaned_journal_records: int
    orphaned_task_ids: int
    rekeyed_journal_records: int
    shards: list[str]
    adaptive: MergeAdaptive | None
    journal: str
    orphaned_note: NotRequired[str]


def _checked_keys(shard_paths: tuple[Path, ...], tasks: pd.DataFrame) -> pd.DataFrame:
    """The key columns of every shard output, each in its shard, no duplicate across them."""
    num_shards = len(shard_paths)
    parts = [_check_shard(p, i, num_shards, tasks) for i, p in enumerate(shard_paths)]
    keys = pd.concat(parts, ignore_index=True)
    dup = keys.duplicated(["task_index", "rollout_index"])
    if dup.any():
        first = keys[dup].iloc[0]
        raise MergeError(
            f"duplicate rollout (task_index={first.task_index}, "
            f"rollout_index={first.rollout_index}) across shard files"
        )
    return keys


def _expected(shard_paths: tuple[Path, ...], tasks: pd.DataFrame, keys: pd.DataFrame):
    """(rollouts expected per task, the adaptive plans or None), checked against `keys`:
    under adaptive sampling a task is complete with the rollouts its plan needed."""
    present = keys.groupby("task_index").size().reindex(tasks.index, fill_value=0)
    plans = read_plans(list(shard_paths))
    expected = tasks["num_repeats"]
    if plans is not None:
        planned = plans.set_index("task_index")["planned"].reindex(tasks.index)
        expected = planned.fillna(expected).astype(np.int64)
    missing = expected - present
    if (missing != 0).any():
        n = int(missing[missing != 0].abs().sum())
        raise MergeError(
            f"{n} (task_index, rollout_index) pairs missing or extra in the "
            f"shard outputs; rerun the affected shards"
        )
    return expected, plans


def run(cfg: Config | None, paths: MergePaths) -> MergeReport:
    """Check the shard outputs (paths.shards, shard i at position i) against the tasks table
    (paths.tasks) and the journal (paths.journal), link them as one dataset (paths.out) and
    write the merge report (paths.report, also returned). Needs no config."""
    tasks = (
        pq.read_table(paths.tasks, columns=["task_index", "task_id", "label", "num_repeats"])
        .to_pandas()
        .set_index("task_index")
    )
    keys = _checked_keys(paths.shards, tasks)
    expected, plans = _expected(paths.shards, tasks, keys)
    orphaned, orphaned_ids, rekeyed = _journal_counts(scan_journal(paths.journal).keys, tasks)
    by_label = (
        keys.assign(label=keys["task_index"].map(tasks["label"]))
        .groupby(["label", "status"])
        .size()
        .unstack(fill_value=0)
    )
    report: MergeReport = {
        "num_rollouts": len(keys),
        "num_ok": int((keys["status"] == OK).sum()),
        "by_status": {k: int(v) for k, v in keys["status"].value_counts().items()},
        "by_label": {
            lbl: {k: int(v) for k, v in row.items() if v} for lbl, row in by_label.iterrows()
        },
        "orphaned_journal_records": orphaned,
        "orphaned_task_ids": orphaned_ids,
        "rekeyed_journal_records": rekeyed,
        "shards": [str(p) for p in paths.shards],
        "adaptive": None
        if plans is None
        else {
            "tasks_stopped_early": int(plans["stopped_early"].sum()),
            "rollouts_not_sampled": int((tasks["num_repeats"] - expected).sum()),
        },
        "journal": str(paths.journal),
    }
    if orphaned:
        report["orphaned_note"] = (
            "journal records whose task is no longer in the tasks "
            "table (re-materialized); kept in the journal, not used"
        )
    _link_dataset(list(paths.shards), paths.out)
    write_json_atomic(paths.report, report)
    return report


def _journal_counts(keys: pa.Table, tasks: pd.DataFrame) -> tuple[int, int, int]:
    """(orphaned records, their distinct task ids, re-keyed records) of the journal's keys.

    Orphaned: the task_id is no longer in the tasks table. Re-keyed: the task is still there
    but not at the record's task_index (the table was re-materialized and the task moved); it
    is used under the task's new index. Arrow hash lookups: a sweep's journal holds millions
    of records (docs/benchmarks.md, "merge + profile")."""
    if keys.num_rows == 0:
        return 0, 0, 0
    t_id = pa.array(tasks["task_id"].astype(object).to_numpy(), pa.string())
    jid = keys.column("task_id")
    by_id = pc.index_in(jid, value_set=t_id)  # first task carrying the record's task_id
    orphan = pc.is_null(by_id)
    orphaned = int(pc.sum(orphan.cast(pa.int64())).as_py() or 0)
    orphaned_ids = int(pc.count_distinct(jid.filter(orphan)).as_py()) if orphaned else 0
    pid = by_id.fill_null(-1).to_numpy(zero_copy_only=False)
    at = (
        pc.index_in(keys.column("task_index"), value_set=pa.array(tasks.index.to_numpy()))
        .fill_null(-1)
        .to_numpy(zero_copy_only=False)
    )
    id_class = pc.index_in(t_id, value_set=t_id).to_numpy(zero_copy_only=False)
    exact = (at >= 0) & (id_class[np.maximum(at, 0)] == pid)
    return orphaned, orphaned_ids, int(((pid >= 0) & ~exact).sum())


def journal_notes(report_path: str | Path, since: float = 0.0) -> list[str]:
    """What a (re-)run should tell its user about the journal, from a merge report written
    at or after `since`: rollouts re-keyed to a moved task, rollouts orphaned."""
    path = Path(report_path)
    if not path.exists() or path.stat().st_mtime < since:
        return []
    report = json.loads(path.read_text())
    notes = []
    journal = Path(report.get("journal", "the journal"))
    if report.get("rekeyed_journal_records"):
        notes.append(
            f"{report['rekeyed_journal_records']} journaled rollouts belong to tasks "
            f"that moved to a new task_index (the tasks table was re-materialized); "
            f"they were re-keyed by task_id and reused"
        )
    if report.get("orphaned_journal_records"):
        notes.append(
            f"{report['orphaned_journal_records']} journaled rollouts of "
            f"{report['orphaned_task_ids']} tasks that are no longer in the tasks "
            f"table are orphaned: kept in {journal}, not used"
        )
    return notes


def _link_dataset(shards: list[Path], out_dir: Path) -> None:
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for p in shards:
            target = tmp / f"part-{p.stem}.parquet"
            try:
                os.link(p, target)
            except OSError:  # another filesystem, or links not allowed: copy
                shutil.copyfile(p, target)
        if out_dir.exists():  # os.replace cannot replace a non-empty directory
            shutil.rmtree(out_dir)
