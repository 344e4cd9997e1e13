"""check: verify, read-only, the invariants of a run directory (results/<run>/).

  - the tasks table is indexed 0..T-1 and the materialize report's [start, end) ranges cover it
  - shards/<i>-of-<N>.parquet partition the tasks exactly (each task in exactly one shard, the
    one `store.shards.shard_of` assigns it, with the same task_id)
  - every rollout in rollouts/<i>-of-<N>.parquet belongs to shard i
  - no duplicate (task_index, rollout_index), within a shard output or across them, nor in the
    merged dataset; rollout_index within [0, num_repeats)
  - every rollout's task_id matches its task (shard outputs and merged dataset)
  - the merged rollouts.parquet holds exactly the union of the shard outputs
  - every label has rollouts, and every label is complete (all of tasks x num_repeats present;
    under adaptive sampling, every task's planned rollouts, from the shard outputs)
  - every rollout, in the shard outputs and the merged dataset, has one and the same gen_key
    (model, sampling and seed scheme: shards made before a change are not mixed with new ones)
  - every scored episode of a label that acts is journaled whole (tools/check_episodes.py)

Only key columns are read (never completion text), and the extras of the labels that act.
Exit 0 when all hold, else 1 with the list.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rewardprof.store.layout import RunLayout, current_num_shards
from rewardprof.store.plans import read_plans
from rewardprof.store.shards import shard_of
from rewardprof.tools import add_run_dir_arguments
from rewardprof.tools.check_episodes import check_episodes


def _num_shards(layout: RunLayout, given: int | None, problems: list[str]) -> int | None:
    """The shard count to check: given, else the layout written last (store/layout.py)."""
    n = given or current_num_shards(layout)
    if n is None:
        problems.append(
            f"{layout.root}: cannot tell the shard count (layouts found: none); pass --num-shards"
        )
    return n


def _keys(path: Path, cols: list[str]) -> dict[str, np.ndarray]:
    t = pq.read_table(path, columns=cols)
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in cols}


def _first(mask: np.ndarray, values: np.ndarray) -> int:
    return int(values[np.flatnonzero(mask)[0]])


def _flag(
    problems: list[str], where: str, mask: np.ndarray, ti: np.ndarray, what: str, first: str
) -> None:
    """One problem line for the rows in `mask`: how many, and the task_index of the first."""
    if mask.any():
        problems.append(f"{where}: {int(mask.sum())} {what} ({first} {_first(mask, ti)})")


class _Tasks:
    def __init__(self, path: Path):
        k = _keys(path, ["task_index", "task_id", "label", "num_repeats"])
        self.index, self.id = k["task_index"].astype(np.int64), k["task_id"].astype(object)
        self.label, self.repeats = k["label"].astype(object), k["num_repeats"].astype(np.int64)
        self.T = len(self.index)

    def id_mismatch(self, ti: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unknown task_index mask, task_id mismatch mask) for rollout keys."""
        unknown = (ti < 0) | (ti >= self.T)
        safe = np.where(unknown, 0, ti)
        wrong = ~unknown & (self.id[safe] != tid.astype(object))
        return unknown, wrong


def _rollout_problems(
    where: str, k: dict[str, np.ndarray], tasks: _Tasks, problems: list[str]
) -> None:
    ti, ri = k["task_index"].astype(np.int64), k["rollout_index"].astype(np.int64)
    unknown, wrong = tasks.id_mismatch(ti, k["task_id"])
    _flag(problems, where, unknown, ti, "rollouts for task_index outside the tasks table", "first")
    what = "rollouts carry a task_id that does not match their task"
    _flag(problems, where, wrong, ti, what, "first task_index")
    known = ~unknown
    bad_ri = known & ((ri < 0) | (ri >= tasks.repeats[np.where(known, ti, 0)]))
    what = "rollouts with rollout_index outside [0, num_repeats)"
    _flag(problems, where, bad_ri, ti, what, "first task_index")
    _duplicates(where, ti, ri, problems)


def _pair_keys(ti: np.ndarray, ri: np.ndarray) -> np.ndarray:
    return ti.astype(np.int64) * (1 << 20) + ri.astype(np.int64)


def _duplicates(where: str, ti: np.ndarray, ri: np.ndarray, problems: list[str]) -> None:
    keys, counts = np.unique(_pair_keys(ti, ri), return_counts=True)
    if (counts > 1).any():
        k = int(keys[counts > 1][0])
        problems.append(
            f"{where}: {int((counts > 1).sum())} duplicate (task_index, "
            f"rollout_index) pairs (first ({k >> 20}, {k & ((1 << 20) - 1)}))"
        )


def check_run(run_dir: str | Path, num_shards: int | None = None) -> tuple[list[str], dict]:
    """All problems found (empty when the run directory is sound) and a few counts."""
    layout = RunLayout(run_dir)
    for p in (layout.tasks, layout.materialize_report):
        if not p.exists():
            return [f"{p}: missing (not a materialized run directory)"], {}
    problems: list[str] = []
    tasks = _Tasks(layout.tasks)
    report = json.loads(layout.materialize_report.read_text())
    _check_tasks_table(layout, tasks, report, problems)
    n = _num_shards(layout, num_shards, problems)
    counts: dict[str, Any] = {"tasks": tasks.T, "num_shards": n}
    shard_keys: list[np.ndarray] = []
    if n is not None:
        _check_shard_tasks(layout, n, tasks, problems)
        shard_keys = _check_shard_outputs(layout, n, tasks, problems)
    union = np.concatenate(shard_keys) if shard_keys else np.empty(0, np.int64)
    _check_gen_keys(_gen_keys_by_file(layout, n), problems)
    present = _check_merged(layout, n, tasks, union, problems)
    counts["rollouts"] = len(present)
    if n is not None:
        _use_planned_repeats(layout, n, tasks)
    _check_labels(report, tasks, present, problems)
    counts["episodes"] = check_episodes(layout.rollouts, report, problems)
    counts["warnings"] = audit_warnings(layout)
    return problems, counts


def _check_tasks_table(layout: RunLayout, tasks: _Tasks, report: dict, problems: list[str]) -> None:
    """The tasks table is indexed 0..T-1 and the materialize report's ranges cover it, each
    range's tasks labelled as its entry."""
    if not np.array_equal(tasks.index, np.arange(tasks.T)):
        problems.append(f"{layout.tasks}: task_index is not 0..{tasks.T - 1} in order")
    report_path = layout.materialize_report
    expect = 0
    for e in report["entries"]:
        if e["start"] != expect or e["end"] < e["start"]:
            problems.append(
                f"{report_path}: entry {e['label']!r} covers [{e['start']}, "
                f"{e['end']}), expected to start at {expect}"
            )
        lab = tasks.label[e["start"] : e["end"]]
        if len(lab) and (lab != e["label"]).any():
            problems.append(
                f"{report_path}: tasks [{e['start']}, {e['end']}) are not all "
                f"labelled {e['label']!r} in the tasks table"
            )
        expect = e["end"]
    if expect != tasks.T:
        problems.append(f"{report_path}: entries cover [0, {expect}) but there are {tasks.T} tasks")


def _gen_keys_by_file(layout: RunLayout, n: int | None) -> dict[str, dict[str, int]]:
    """gen_key -> rollouts, of each shard output there is and of the merged dataset."""
    keys_by_file: dict[str, dict[str, int]] = {}
    if n is not None:
        for p in layout.all_shard_rollouts(n):
            if p.exists():
                keys_by_file[str(p)] = _gen_keys(p)
    if layout.rollouts.exists():
        keys_by_file[str(layout.rollouts)] = _gen_keys(layout.rollouts)
    return keys_by_file


def _check_merged(
    layout: RunLayout, n: int | None, tasks: _Tasks, union: np.ndarray, problems: list[str]
) -> np.ndarray:
    """The merged dataset's rollouts checked, and checked to be the union of the shard outputs
    (their pair keys, `union`). Returns the pair keys the run holds: the merged dataset's, else
    the shard outputs'."""
    merged_path = layout.rollouts
    if not merged_path.exists():
        problems.append(f"{merged_path}: missing (run the merge)")
        return union
    k = _keys(merged_path, ["task_index", "rollout_index", "task_id"])
    _rollout_problems(str(merged_path), k, tasks, problems)
    merged = _pair_keys(k["task_index"], k["rollout_index"])
    if n is not None:
        only_merged = np.setdiff1d(merged, union)
        only_shards = np.setdiff1d(union, merged)
        if len(only_merged) or len(only_shards) or len(merged) != len(union):
            problems.append(
                f"{merged_path}: not the union of the shard outputs "
                f"({len(only_merged)} pairs only in the merge, "
                f"{len(only_shards)} only in the shards; {len(merged)} rows "
                f"vs {len(union)})"
            )
    return merged


def _use_planned_repeats(layout: RunLayout, n: int, tasks: _Tasks) -> None:
    """Adaptive sampling: a task is complete with its planned rollouts (the shard outputs'
    plans), not num_repeats."""
    plans = read_plans([p for p in layout.all_shard_rollouts(n) if p.exists()])
    if plans is not None:
        planned = plans.set_index("task_index")["planned"].reindex(tasks.index)
        tasks.repeats = planned.fillna(pd.Series(tasks.repeats)).to_numpy(np.int64)


def audit_warnings(layout: RunLayout) -> list[str]:
    """bayes: the audit's warnings (adaptive/audit.json): early decisions that flipped more
    often than delta allows. A warning, not a problem: the run is complete and sound."""
    path = layout.adaptive_audit
    if not path.exists():
        return []
    return [f"{path}: {w}" for w in json.loads(path.read_text()).get("warnings", [])]


def _gen_keys(path: Path) -> dict[str, int]:
    counts = pc.value_counts(pq.read_table(path, columns=["gen_key"]).column("gen_key"))
    return {str(v["values"]): int(v["counts"]) for v in counts.to_pylist()}


def _check_gen_keys(keys_by_file: dict[str, dict[str, int]], problems: list[str]) -> None:
    """One gen_key everywhere: rollouts of another model, sampling setup or seed scheme (e.g.
    a shard output written before an upgrade, next to new ones) are not one dataset."""
    files: dict[str, list[str]] = {}
    for f, counts in keys_by_file.items():
        for key in counts:
            files.setdefault(key, []).append(Path(f).name)
    if len(files) > 1:
        where = "; ".join(
            f"{key} in {', '.join(names[:3])}"
            f"{f' and {len(names) - 3} more' if len(names) > 3 else ''}"
            for key, names in sorted(files.items())
        )
        problems.append(
            f"rollouts carry {len(files)} different gen_keys (model, sampling or "
            f"seed scheme): {where}; rerun the shards of the old setup"
        )


def _check_shard_tasks(layout: RunLayout, n: int, tasks: _Tasks, problems: list[str]) -> None:
    seen = np.zeros(tasks.T, dtype=np.int64)
    for i in range(n):
        p = layout.shard_tasks(i, n)
        if not p.exists():
            problems.append(f"{p}: missing")
            continue
        k = _keys(p, ["task_index", "task_id"])
        ti = k["task_index"].astype(np.int64)
        unknown, wrong = tasks.id_mismatch(ti, k["task_id"])
        other = ~unknown & (shard_of(ti, n) != i)
        if unknown.any():
            problems.append(f"{p}: {int(unknown.sum())} tasks not in the tasks table")
        _flag(problems, str(p), other, ti, "tasks belong to another shard", "first task_index")
        what = "tasks whose task_id differs from the tasks table"
        _flag(problems, str(p), wrong, ti, what, "first task_index")
        np.add.at(seen, ti[~unknown], 1)
    if (seen == 0).any():
        problems.append(
            f"{layout.shards_dir}: {int((seen == 0).sum())} tasks are in no shard "
            f"(first task_index {int(np.flatnonzero(seen == 0)[0])})"
        )
    if (seen > 1).any():
        problems.append(
            f"{layout.shards_dir}: {int((seen > 1).sum())} tasks are in more than "
            f"one shard (first task_index {int(np.flatnonzero(seen > 1)[0])})"
        )


def _check_shard_outputs(layout: RunLayout, n: int, tasks: _Tasks, problems: list[str]) -> list:
    out = []
    for i, p in enumerate(layout.all_shard_rollouts(n)):
        if not p.exists():
            problems.append(f"{p}: missing (shard {i} has not finished)")
            continue
        k = _keys(p, ["task_index", "rollout_index", "task_id"])
        ti = k["task_index"].astype(np.int64)
        other = shard_of(ti, n) != i
        what = "rollouts belong to another shard's task"
        _flag(problems, str(p), other, ti, what, "first task_index")
        _rollout_problems(str(p), k, tasks, problems)
        out.append(_pair_keys(ti, k["rollout_index"]))
    if out:
        _duplicates(
            f"{layout.rollouts_dir} (across shards)",
            np.concatenate(out) >> 20,
            np.concatenate(out) & ((1 << 20) - 1),
            problems,
        )
    return out


def _check_labels(report: dict, tasks: _Tasks, present: np.ndarray, problems: list[str]) -> None:
    ti = np.unique(present) >> 20  # distinct pairs only
    for e in report["entries"]:
        have = int(((ti >= e["start"]) & (ti < e["end"])).sum())
        want = int(tasks.repeats[e["start"] : e["end"]].sum())
        if have == 0:
            problems.append(f"label {e['label']!r}: no rollouts at all")
        elif have < want:
            problems.append(
                f"label {e['label']!r}: incomplete, {have} of {want} rollouts "
                f"present ({want - have} missing)"
            )


def run_command(args: argparse.Namespace) -> int:
    """`rewardprof check`: list the problems (exit 1) or say that every invariant holds."""
    problems, counts = check_run(args.run_dir, args.num_shards)
    for w in counts.get("warnings", []):
        print(f"warning: {w}")
    if problems:
        print(f"{args.run_dir}: {len(problems)} problem(s):")
        for p in problems:
            print(f"  - {p}")
        return 1
    episodes = f" ({counts['episodes']} episodes)" if counts.get("episodes") else ""
    print(
        f"ok: {args.run_dir}: {counts['tasks']} tasks, {counts['rollouts']} rollouts{episodes}, "
        f"{counts['num_shards']} shards; every invariant holds"
    )
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `rewardprof check` (the command table is in rewardprof.cli)."""
    add_run_dir_arguments(p, "shard layout to check (default: the one written last)")
