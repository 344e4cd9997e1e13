"""profile: one row per task with its reward distribution, split per entry by index range.

Rewards are over ok rollouts only; failures are counted by kind (`num_failed/<kind>`) and never
enter a mean as 0. A rollout passes when reward >= profile.pass_threshold. Token statistics are
over every rollout that produced a completion.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rewardprof.atomic import atomic_path, write_json_atomic
from rewardprof.config import Config
from rewardprof.records import OK
from rewardprof.stats import beta_interval, grpo_signal, pass_at_k, wilson_interval

_ROLLOUT_COLS = ["task_index", "rollout_index", "status", "reward", "finish_reason",
                 "completion_tokens"]


def _describe(series_group, prefix: str) -> pd.DataFrame:
    out = pd.DataFrame({
        f"mean/{prefix}": series_group.mean(),
        f"std/{prefix}": series_group.std(ddof=0),
        f"min/{prefix}": series_group.min(),
        f"max/{prefix}": series_group.max(),
        f"median/{prefix}": series_group.median(),
    })
    return out


def task_profile(cfg: Config, tasks: pd.DataFrame, rollouts: pd.DataFrame) -> pd.DataFrame:
    p = cfg.profile
    ok = rollouts[rollouts["status"] == OK]
    prof = tasks[["task_index", "task_id", "label", "environment", "num_repeats"]].copy()
    prof = prof.set_index("task_index")
    prof = prof.join(_describe(ok.groupby("task_index")["reward"], "reward"))
    with_text = rollouts[rollouts["completion_tokens"].notna()]
    prof = prof.join(_describe(with_text.groupby("task_index")["completion_tokens"],
                               "output_tokens"))
    present = rollouts.groupby("task_index").size()
    prof["num_rollouts"] = ok.groupby("task_index").size().reindex(prof.index, fill_value=0)
    prof["expected_num_rollouts"] = prof.pop("num_repeats")
    prof["missing_num_rollouts"] = (prof["expected_num_rollouts"]
                                    - present.reindex(prof.index, fill_value=0))
    failed = rollouts[rollouts["status"] != OK]
    prof["num_failed"] = failed.groupby("task_index").size().reindex(prof.index, fill_value=0)
    if len(failed):
        kinds = failed.groupby(["task_index", "status"]).size().unstack(fill_value=0)
        for kind in kinds.columns:
            prof[f"num_failed/{kind}"] = kinds[kind].reindex(prof.index, fill_value=0)
    truncated = rollouts["finish_reason"] == "length"
    prof["num_truncated"] = (rollouts[truncated].groupby("task_index").size()
                             .reindex(prof.index, fill_value=0))
    passed = ok[ok["reward"] >= p.pass_threshold]
    prof["num_passed"] = passed.groupby("task_index").size().reindex(prof.index, fill_value=0)
    # pass rates with and without truncated rollouts (a truncated answer is rarely right)
    ok_full = ok[ok["finish_reason"] != "length"]
    n_full = ok_full.groupby("task_index").size().reindex(prof.index, fill_value=0)
    c_full = (ok_full[ok_full["reward"] >= p.pass_threshold].groupby("task_index").size()
              .reindex(prof.index, fill_value=0))
    n = prof["num_rollouts"].to_numpy()
    c = prof["num_passed"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        prof["pass_rate"] = np.where(n > 0, c / np.maximum(n, 1), np.nan)
        prof["pass_rate_excl_truncated"] = np.where(n_full > 0, c_full / np.maximum(n_full, 1),
                                                    np.nan)
    for k in p.pass_at_k:
        prof[f"pass@{k}"] = [pass_at_k(int(a), int(b), k) for a, b in zip(n, c, strict=True)]
    interval = wilson_interval if p.ci_method == "wilson" else beta_interval
    bounds = [interval(int(b), int(a), p.ci_level) or (None, None)
              for a, b in zip(n, c, strict=True)]
    prof["pass_rate_ci_low"] = [b[0] for b in bounds]
    prof["pass_rate_ci_high"] = [b[1] for b in bounds]
    prof["grpo_signal"] = [grpo_signal(None if np.isnan(x) else float(x), p.group_size)
                           for x in prof["pass_rate"]]
    prof["sample"] = tasks.set_index("task_index")["row"]
    return prof.reset_index()


def label_summary(prof: pd.DataFrame, report: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for e in report["entries"]:
        part = prof[(prof["task_index"] >= e["start"]) & (prof["task_index"] < e["end"])]
        expected = int(part["expected_num_rollouts"].sum())
        rate = part["pass_rate"]
        rows.append({
            "label": e["label"],
            "environment": e["environment"],
            "tasks": len(part),
            "rollouts": int(part["num_rollouts"].sum()),
            "expected_rollouts": expected,
            "failed": int(part["num_failed"].sum()),
            "truncated": int(part["num_truncated"].sum()),
            "mean_reward": _f(part["mean/reward"].mean()),
            "mean_pass_rate": _f(rate.mean()),
            "share_pass_rate_0": _f((rate == 0).mean()) if len(part) else None,
            "share_pass_rate_1": _f((rate == 1).mean()) if len(part) else None,
            "mean_grpo_signal": _f(part["grpo_signal"].astype(float).mean()),
            "mean_output_tokens": _f(part["mean/output_tokens"].mean()),
            "failure_rate": _f(part["num_failed"].sum() / expected) if expected else None,
            "truncation_rate": _f(part["num_truncated"].sum() / expected) if expected else None,
        })
    return rows


def _f(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else round(float(x), 6)


def _table(rows: list[dict[str, Any]]) -> str:
    cols = ["label", "environment", "tasks", "rollouts", "failed", "truncated",
            "mean_reward", "mean_pass_rate", "share_pass_rate_0", "share_pass_rate_1"]
    body = [[("-" if r[c] is None else f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]))
             for c in cols] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths, strict=True))  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(b) for b in body])


def write_profile(cfg: Config, tasks_path: str | Path, rollouts_path: str | Path,
                  report_path: str | Path, out_dir: str | Path) -> dict[str, Any]:
    out = Path(out_dir)
    tasks = pq.read_table(tasks_path, columns=["task_index", "task_id", "label", "environment",
                                               "num_repeats", "row"]).to_pandas()
    rollouts = pq.read_table(rollouts_path, columns=_ROLLOUT_COLS).to_pandas()
    report = json.loads(Path(report_path).read_text())
    prof = task_profile(cfg, tasks, rollouts)
    table = pa.Table.from_pandas(prof, preserve_index=False)
    with atomic_path(out / "tasks.parquet") as tmp:
        pq.write_table(table, tmp, compression="zstd")
    with atomic_path(out / "tasks.jsonl") as tmp, tmp.open("w", encoding="utf-8") as f:
        records = prof.drop(columns="sample").to_dict(orient="records")
        for rec, sample in zip(records, prof["sample"], strict=True):
            rec = {k: (None if isinstance(v, float) and np.isnan(v) else v)
                   for k, v in rec.items()}
            # `sample` is already canonical JSON text: embed it as an object, not a string
            f.write(json.dumps(rec, default=_json_default)[:-1] + ', "sample": ' + sample + "}\n")
    for e in report["entries"]:
        part = table.filter(pa.compute.and_(
            pa.compute.greater_equal(table["task_index"], e["start"]),
            pa.compute.less(table["task_index"], e["end"])))
        with atomic_path(out / "by_label" / f"{e['label']}.parquet") as tmp:
            pq.write_table(part, tmp, compression="zstd")
    labels = label_summary(prof, report)
    summary = {"run": cfg.run, "num_tasks": len(prof), "labels": labels,
               "overall": {
                   "rollouts": int(prof["num_rollouts"].sum()),
                   "expected_rollouts": int(prof["expected_num_rollouts"].sum()),
                   "failed": int(prof["num_failed"].sum()),
                   "mean_reward": _f(prof["mean/reward"].mean()),
                   "mean_pass_rate": _f(prof["pass_rate"].mean()),
               }}
    write_json_atomic(out / "summary.json", summary)
    print(_table(labels), file=sys.stdout, flush=True)
    return summary


def _json_default(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return None if np.isnan(v) else float(v)
    return str(v)
