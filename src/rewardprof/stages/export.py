"""export: the filtered, re-weighted training set, in each entry's source row format.

Every kept task's original row (the `sample` column of the profile: the source row as JSON) is
written back with the profile fields attached under `export.profile_key` (`reward_profile`),
one JSONL file per label and one combined file, plus a kept/dropped report per label.

Keep rules (config `export`): decisions/keep_rules.py applies them; docs/profile.md lists them. A
dropped task is counted under the first rule that drops it, and report.json names every dropped
task's reason (`dropped_tasks`: reason -> task indices), and the tasks whose decision rests on
the survivors of failed rollouts (`undecided_by_failures`), kept or dropped per
`on_undecided`.

Weights: with `target_share` {label: share}, every kept task of label l gets
    weight_l = share_l / sum(shares) * kept_total / kept_l
so the weights sum to kept_total and label l holds share_l of the total weight. A label with a
share but no kept task cannot reach its target; the other shares are renormalized and the
report says so. Without target_share every weight is 1.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path, write_json_atomic
from rewardprof.core.config import Config
from rewardprof.decisions.keep_rules import KEEP, REASONS, OpenTasks, decision_range
from rewardprof.decisions.keep_rules import drop_reasons as rule_reasons
from rewardprof.stages import ExportPaths
from rewardprof.store.jsonl import SLICE_ROWS, json_objects, with_key, write_chunks
from rewardprof.store.layout import ExportFiles

_PROFILE_FIELDS = [
    "task_index",
    "task_id",
    "label",
    "environment",
    "num_rollouts",
    "expected_num_rollouts",
    "num_passed",
    "pass_rate",
    "pass_rate_excl_truncated",
    "pass_rate_ci_low",
    "pass_rate_ci_high",
    "grpo_signal",
    "grpo_signal_pass",
    "mean/reward",
    "std/reward",
    "mean/output_tokens",
    "num_failed",
    "num_truncated",
    "post_mean",
    "post_signal",
    "post_p_signal",
    "stopped_early",
]


def _num(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy().astype(float)  # nulls -> NaN


def _columns(cfg: Config, table: pa.Table) -> dict[str, np.ndarray]:
    """The keep rules' columns (decisions/keep_rules.py) from a profile table."""
    names = set(table.column_names)
    rate = _num(table, cfg.export.pass_rate_column)
    if "num_distinct_rewards" in names:
        var = _num(table, "num_distinct_rewards") > 1
    elif "std/reward" in names:
        var = _num(table, "std/reward") > 0
    else:  # a profile without reward columns: 0/1 rewards assumed
        var = (rate > 0) & (rate < 1)
    cols = {
        "num_rollouts": _num(table, "num_rollouts"),
        "pass_rate": rate,
        "has_variance": var,
    }
    for name in ("grpo_signal", "post_signal", "post_p_signal", "label"):
        if name in names:
            cols[name] = table.column(name).to_numpy(zero_copy_only=False)
    return cols


def _undecided_by_failures(cfg: Config, table: pa.Table) -> np.ndarray:
    """Tasks whose keep/drop would differ under some outcome of their failed or missing
    rollouts (decisions/keep_rules.py, `decision_range`); False where nothing is unknown."""
    names = set(table.column_names)
    cols = _columns(cfg, table)
    n = cols["num_rollouts"]
    if "expected_num_rollouts" not in names or "num_passed" not in names:
        return np.zeros(len(n), dtype=bool)
    unknown = np.nan_to_num(_num(table, "expected_num_rollouts") - n).astype(np.int64)
    rewards = [f"{k}/reward" for k in ("min", "max")]
    if set(rewards) <= names:  # 0/1 rewards: at most two values, each 0 or 1
        lo, hi = _num(table, "min/reward"), _num(table, "max/reward")
        binary = np.isin(lo, [0.0, 1.0]) & np.isin(hi, [0.0, 1.0])
        if "num_distinct_rewards" in names:
            binary &= _num(table, "num_distinct_rewards") <= 2
    else:
        binary = np.ones(len(n), dtype=bool)
    open_tasks = OpenTasks(cols, _num(table, "num_passed"), unknown, binary)
    can_keep, can_drop = decision_range(cfg.export, open_tasks, cfg.profile.group_size)
    return can_keep & can_drop & (unknown > 0) & (n >= cfg.export.min_rollouts)


def _reasons(cfg: Config, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(reason per task, undecided_by_failures per task). A task adaptive sampling stopped
    early carries its decision at num_repeats (profile: stopped_early, adaptive_keep)."""
    undecided = _undecided_by_failures(cfg, table)
    decided = None
    if "stopped_early" in table.column_names:
        stopped = table.column("stopped_early").fill_null(False).to_numpy(zero_copy_only=False)
        keep = table.column("adaptive_keep").fill_null(False).to_numpy(zero_copy_only=False)
        decided = (stopped.astype(bool), keep.astype(bool))
        undecided &= ~decided[0]  # its plan already weighed every unknown rollout
    return rule_reasons(cfg.export, _columns(cfg, table), undecided, decided), undecided


def drop_reasons(cfg: Config, table: pa.Table) -> np.ndarray:
    """Per task: -1 when kept, else the index in REASONS of the first rule that drops it."""
    return _reasons(cfg, table)[0]


def label_weights(cfg: Config, kept_per_label: dict[str, int]) -> tuple[dict[str, float], list]:
    """weight per label (see the module doc) and notes on targets that cannot be met."""
    share = cfg.export.target_share
    if not share:
        return {lbl: 1.0 for lbl in kept_per_label}, []
    notes = [
        f"{lbl}: target share {share[lbl]} but no task kept"
        for lbl, k in kept_per_label.items()
        if share.get(lbl, 0) > 0 and k == 0
    ]
    reachable = {lbl: share.get(lbl, 0.0) for lbl, k in kept_per_label.items() if k > 0}
    total_share = sum(reachable.values())
    total_kept = sum(kept_per_label.values())
    weights = {}
    for lbl, k in kept_per_label.items():
        s = reachable.get(lbl, 0.0)
        weights[lbl] = (s / total_share * total_kept / k) if (k and total_share) else 0.0
    return weights, notes


class ExportReport(TypedDict):
    run: str
    rules: dict[str, Any]
    tasks: int
    kept: int
    dropped: int
    labels: list[dict[str, Any]]
    notes: list[str]
    undecided_by_failures: dict[str, Any]
    dropped_tasks: dict[str, list[int]]


def _label_rows(
    cfg: Config,
    entries: list[dict[str, Any]],
    entry_rows: list[np.ndarray],
    reason: np.ndarray,
    undecided: np.ndarray,
    kept_per_label: dict[str, int],
    weights: dict[str, float],
    total_kept: int,
) -> list[dict[str, Any]]:
    """Per entry: its tasks, kept, dropped and why, its weight and share of the kept."""
    labels = []
    for e, in_range in zip(entries, entry_rows, strict=True):
        dropped = reason[in_range]
        labels.append(
            {
                "label": e["label"],
                "environment": e["environment"],
                "tasks": int(in_range.sum()),
                "kept": kept_per_label[e["label"]],
                "dropped": int((dropped >= 0).sum()),
                "dropped_by": {r: int((dropped == i).sum()) for i, r in enumerate(REASONS)},
                "undecided_by_failures": int(undecided[in_range].sum()),
                "weight": round(weights[e["label"]], 9),
                "kept_share": round(kept_per_label[e["label"]] / total_kept, 9)
                if total_kept
                else None,
                "target_share": cfg.export.target_share.get(e["label"]),
            }
        )
    return labels


def run(cfg: Config, paths: ExportPaths) -> ExportReport:
    """Export the tasks of the profile (paths.profile) that the keep rules keep, weighted, into
    paths.out (split by the index ranges of the materialize report, paths.report); write the
    kept/dropped report there (also returned)."""
    table = pq.read_table(paths.profile)
    report = json.loads(paths.report.read_text())
    reason, undecided = _reasons(cfg, table)
    ti = table.column("task_index").to_numpy()
    entry_rows, kept_per_label = [], {}
    for e in report["entries"]:
        in_range = (ti >= e["start"]) & (ti < e["end"])
        kept_per_label[e["label"]] = int((in_range & (reason == KEEP)).sum())
        entry_rows.append(in_range)
    weights, notes = label_weights(cfg, kept_per_label)
    weight = np.zeros(table.num_rows)
    for e, in_range in zip(report["entries"], entry_rows, strict=True):
        weight[in_range] = weights[e["label"]]

    kept = reason == KEEP
    kept_table = table.filter(pa.array(kept))
    fields = [f for f in _PROFILE_FIELDS if f in table.column_names]
    fields += [c for c in table.column_names if c.startswith("pass@")]
    prof = kept_table.select(fields).append_column("weight", pa.array(weight[kept]))
    _write_files(kept_table, prof, ti[kept], report, paths.out, cfg.export.profile_key)

    total_kept = int(kept.sum())
    result: ExportReport = {
        "run": cfg.run,
        "rules": cfg.export.model_dump(mode="json"),
        "tasks": table.num_rows,
        "kept": total_kept,
        "dropped": table.num_rows - total_kept,
        "labels": _label_rows(
            cfg,
            report["entries"],
            entry_rows,
            reason,
            undecided,
            kept_per_label,
            weights,
            total_kept,
        ),  # fmt: skip
        "notes": notes,
        "undecided_by_failures": {
            "on_undecided": cfg.export.on_undecided,
            "task_index": ti[undecided].tolist(),
        },
        "dropped_tasks": {r: ti[reason == i].tolist() for i, r in enumerate(REASONS)},
    }
    write_json_atomic(paths.out.report, result)
    return result


def _write_files(
    kept: pa.Table,
    prof: pa.Table,
    kept_ti: np.ndarray,
    report: dict[str, Any],
    out: ExportFiles,
    key: str,
) -> None:
    """combined.jsonl and by_label/<label>.jsonl, written slice by slice (an Arrow string array
    holds at most 2 GB; a sweep's export is more than that as text)."""
    entries = report["entries"]
    starts = np.array([e["start"] for e in entries])
    entry_of = np.searchsorted(starts, kept_ti, side="right") - 1
    with ExitStack() as stack:

        def open_atomic(path: Path):
            return stack.enter_context(stack.enter_context(atomic_path(path)).open("wb"))

        combined = open_atomic(out.combined)
        per_label = [open_atomic(out.by_label(e["label"])) for e in entries]
        for start in range(0, kept.num_rows, SLICE_ROWS):
            sl = slice(start, start + SLICE_ROWS)
            lines = _attach(
                kept.column("sample").slice(start, SLICE_ROWS),
                json_objects(prof.slice(start, SLICE_ROWS)),
                key,
            )
            write_chunks(lines, combined)
            for i in np.unique(entry_of[sl]):
                write_chunks(lines.filter(pa.array(entry_of[sl] == i)), per_label[i])


def _attach(samples: pa.ChunkedArray, profiles: pa.ChunkedArray, key: str) -> pa.ChunkedArray:
    """Each source row (JSON object text) with `key: <profile object>` added."""
    samples = pc.cast(samples, pa.string())
    clash = pc.match_substring(samples, json.dumps(key) + ":")
    if not pc.any(clash).as_py():
        return with_key(samples, key, profiles)
    # a row that already has the key (e.g. re-exporting an export): replace it, in Python
    out = []
    for s, p, c in zip(samples.to_pylist(), profiles.to_pylist(), clash.to_pylist(), strict=True):
        if c:
            row = json.loads(s)
            row[key] = json.loads(p)
            s = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
        else:
            body = s.rstrip()[:-1]
            s = body + ("," if body.strip() != "{" else "") + json.dumps(key) + ":" + p + "}"
        out.append(s)
    return pa.chunked_array([pa.array(out, pa.string())])
