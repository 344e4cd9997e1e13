"""estimate: size a full sweep from a pilot run's per-rollout timings.

Measured from the pilot (results/<run>/), assuming the full sweep runs the same model, sampling
and engine on the same kind of hardware:

* engine time: per rollout job (journal writer), the span from its first request to its last
  finished rollout: what the job held its GPUs for while generating (verification stalls
  included). Summed over jobs, times --gpus-per-engine, this is the pilot's GPU-hours.
* per label: the GPU-hours are split over labels in proportion to their output tokens (+1 per
  rollout): a batched engine spends its time decoding, so long-output environments cost more.
  `--cost-by latency` splits by engine latency per sample instead (a request's latency over its
  n samples), which also charges queueing behind other requests in flight. Rollouts per
  GPU-hour = the label's rollouts / its share of GPU-hours.
* startup overhead per job: the rollout rule's benchmark (benchmarks/rollout/*.tsv) minus the
  job's generation span: engine start, loading the shard, writing outputs.
* useful fraction at K: a task is useful to GRPO when its K samples are not all equal. Predicted
  from the label's empirical-Bayes prior fitted on the pilot's per-task (rollouts, passes), with
  a profile-likelihood interval; and the rollouts adaptive sampling would spend
  (tools/estimate_signal.py). Nothing is rounded before it is divided; only the output is.

For the target config, each label's tasks are counted from its source (after `limit`), or given
with --tasks LABEL=N. Labels absent from the pilot borrow the rate of pilot labels with the same
environment, else the pilot's overall rate (the output says which).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.config import Config, GeneratorSource
from rewardprof.manifest.load import load_config
from rewardprof.sources.files import resolve_source
from rewardprof.store.layout import RunLayout
from rewardprof.tools.estimate_bootstrap import cost_interval, total_useful
from rewardprof.tools.estimate_report import to_markdown
from rewardprof.tools.estimate_signal import (
    adaptive_rollouts,
    group_value_counts,
    useful_prediction,
    value_counts_of,
)
from rewardprof.tools.estimate_startup import startup_overhead

_COLS = [
    "task_index",
    "status",
    "request_n",
    "latency_s",
    "started_at",
    "finished_at",
    "completion_tokens",
    "writer",
    "reward",
]


def _label_of(report: dict[str, Any], task_index: np.ndarray) -> np.ndarray:
    starts = np.array([e["start"] for e in report["entries"]])
    idx = np.searchsorted(starts, task_index, side="right") - 1
    return np.array([e["label"] for e in report["entries"]], dtype=object)[np.clip(idx, 0, None)]


def measure_pilot(
    run_dir: str | Path, gpus_per_engine: int = 1, cost_by: str = "tokens"
) -> dict[str, Any]:
    layout = RunLayout(run_dir)
    report = json.loads(layout.materialize_report.read_text())
    r = pq.read_table(layout.rollouts, columns=_COLS).to_pandas()
    r = r.sort_values("started_at", kind="stable")
    spans = r.groupby("writer", sort=False).agg(
        first=("started_at", "min"), last=("finished_at", "max")
    )
    span_s = (spans["last"] - spans["first"]).clip(lower=0)
    engine_s = float(span_s.sum())
    gpu_h = engine_s * gpus_per_engine / 3600
    r["label"] = _label_of(report, r["task_index"].to_numpy())
    if cost_by == "latency":
        r["cost"] = r["latency_s"].fillna(0) / r["request_n"].fillna(1).clip(lower=1)
    else:  # a batched engine's time goes mostly to decoding: output tokens (+1 per rollout)
        r["cost"] = r["completion_tokens"].fillna(0).astype(float) + 1.0
    total_cost = float(r["cost"].sum()) or 1.0
    prof = pq.read_table(
        layout.profile_tasks, columns=["label", "num_rollouts", "num_passed"]
    ).to_pandas()
    per_task = r.groupby("task_index").agg(cost=("cost", "sum"), rollouts=("cost", "size"))
    per_task["label"] = _label_of(report, per_task.index.to_numpy())
    labels = {}
    for e in report["entries"]:
        mine = r[r["label"] == e["label"]]
        costs = per_task[per_task["label"] == e["label"]]
        share = float(mine["cost"].sum()) / total_cost
        lab_gpu_h = gpu_h * share
        of_label = prof[prof["label"] == e["label"]]
        counts = [
            (int(a), int(b))
            for a, b in zip(of_label["num_rollouts"], of_label["num_passed"], strict=True)
        ]
        labels[e["label"]] = {
            "environment": e["environment"],
            "tasks": e["end"] - e["start"],
            "num_repeats": e["num_repeats"],
            "rollouts": len(mine),
            "mean_output_tokens": _r(mine["completion_tokens"].mean()),
            "gpu_hours": lab_gpu_h,  # rounded in the output only: the basis divides by it
            "cost_share": _r(share),
            "rollouts_per_gpu_hour": len(mine) / lab_gpu_h if lab_gpu_h > 0 else None,
            "counts": counts,  # (scored rollouts, passes) per task
            # (summed cost, rollouts) per task: the GPU-hours interval's bootstrap
            "task_costs": list(zip(costs["cost"], costs["rollouts"], strict=True)),
            "value_counts": value_counts_of(mine),
        }
    jobs = startup_overhead(layout.shard_benchmarks_dir("rollout"), spans["first"], spans["last"])
    return {
        "run_dir": str(layout.root),
        "rollouts": len(r),
        "jobs": jobs["jobs"],
        "attempts": jobs["attempts"],
        "interrupted_shards": jobs["interrupted_shards"],
        "warnings": [jobs["warning"]] if jobs["warning"] else [],
        "engine_hours": _r(engine_s / 3600, 6),
        "gpu_hours": gpu_h,
        "gpus_per_engine": gpus_per_engine,
        "cost_by": cost_by,
        "rollouts_per_gpu_hour": len(r) / gpu_h if gpu_h > 0 else None,
        "output_tokens_per_gpu_hour": _r(r["completion_tokens"].sum() / gpu_h)
        if gpu_h > 0
        else None,
        "startup_overhead_s": _r(jobs["startup_overhead_s"]),
        "labels": labels,
    }


def count_tasks(
    cfg: Config, base_dir: Path | None = None, skip: set[str] | None = None
) -> dict[str, int]:
    """Tasks per entry of a config, without materializing (line / row counts, then limit)."""
    out = {}
    for e in cfg.entries:
        if e.label in (skip or ()):
            continue
        if isinstance(e.source, GeneratorSource):
            n = e.source.size
        else:
            path = resolve_source(e, base_dir)
            if path.suffix == ".parquet":
                n = pq.ParquetFile(path).metadata.num_rows
            else:
                with path.open("rb") as f:
                    n = sum(1 for line in f if line.strip())
        out[e.label] = min(n, e.limit) if e.limit else n
    return out


def estimate(
    pilot: dict[str, Any],
    target: Config,
    gpus: int,
    gpus_per_engine: int = 1,
    tasks: dict[str, int] | None = None,
    base_dir: Path | None = None,
) -> dict[str, Any]:
    given = dict(tasks or {})
    unknown = set(given) - {e.label for e in target.entries}
    if unknown:
        raise ValueError(f"--tasks: unknown label(s) {', '.join(sorted(unknown))}")
    n_tasks = {**count_tasks(target, base_dir, skip=set(given)), **given}
    by_env: dict[str, list[dict]] = {}
    for lab in pilot["labels"].values():
        by_env.setdefault(lab["environment"], []).append(lab)
    rows = []
    for e in target.entries:
        if e.label in pilot["labels"] and pilot["labels"][e.label]["rollouts_per_gpu_hour"]:
            group, basis = [pilot["labels"][e.label]], "label"
            rate = group[0]["rollouts_per_gpu_hour"]
        elif e.environment in by_env:
            group, basis = by_env[e.environment], f"environment {e.environment}"
            h = sum(x["gpu_hours"] for x in group)
            rate = sum(x["rollouts"] for x in group) / h if h else None
        else:
            basis, rate = "overall", pilot["rollouts_per_gpu_hour"]
            group = list(pilot["labels"].values())
        rows.append(_label_row(target, e, n_tasks[e.label], basis, rate, group))
    return _assemble(pilot, target, rows, gpus, gpus_per_engine)


def _borrowed_useful(group: list[dict], k: int, pred: dict) -> dict:
    """A label without pilot data: no point value; its interval spans the intervals of the pilot
    labels it borrows from (it may be like any one of them), and says so."""
    own = [useful_prediction(x["counts"], k) for x in group if x["counts"]]
    return {
        **pred,
        "useful_fraction": None,
        "low": min((p["low"] for p in own), default=0.0),
        "high": max((p["high"] for p in own), default=1.0),
        "basis": "no pilot data: the range of the labels it borrows from",
    }


def _label_row(target: Config, e, n_tasks: int, basis: str, rate, group) -> dict[str, Any]:
    """One label of the target: rollouts, GPU-hours (fixed K and adaptive, with an interval),
    useful tasks; `group`: the pilot labels it is measured by (itself when basis is label)."""
    k = e.num_repeats
    rollouts = n_tasks * k
    hours = rollouts / rate if rate else math.nan
    counts = [t for x in group for t in x["counts"]]
    pred = useful_prediction(counts, k)
    if basis != "label":
        pred = _borrowed_useful(group, k, pred)
    shares = adaptive_rollouts(target, pred["prior"], k, group_value_counts(group), counts)
    cost_lo, cost_hi = cost_interval([t for x in group for t in x.get("task_costs", [])])
    useful = {
        key: None if pred[key] is None else n_tasks * pred[key]
        for key in ("useful_fraction", "low", "high")
    }
    point = useful["useful_fraction"]
    return {
        "label": e.label,
        "environment": e.environment,
        "basis": basis,
        "tasks": n_tasks,
        "num_repeats": k,
        "rollouts": rollouts,
        "rollouts_per_gpu_hour": _r(rate),
        "gpu_hours": _hours(hours),
        "gpu_hours_low": _hours(hours * cost_lo),
        "gpu_hours_high": _hours(hours * cost_hi),
        **{f"gpu_hours_{m}": _hours(hours * share) for m, share in shares.items()},
        **{f"rollouts_{m}": round(rollouts * share) for m, share in shares.items()},
        "useful_basis": pred["basis"],
        "useful_fraction": _r(pred["useful_fraction"]),
        "useful_fraction_low": _r(pred["low"]),
        "useful_fraction_high": _r(pred["high"]),
        "useful_tasks": _r(point, 1),
        "useful_tasks_low": _r(useful["low"], 1),
        "useful_tasks_high": _r(useful["high"], 1),
        "useful_tasks_per_gpu_hour": _r(point / hours) if hours and point is not None else None,
        "prior": pred["prior"].as_dict(),
        "_hours": hours,  # unrounded, for the totals (dropped by _assemble)
        "_useful": useful,
        "_hours_range": (hours * cost_lo, hours * cost_hi),
        "_shares": shares,
    }


def _assemble(
    pilot: dict[str, Any], target: Config, rows: list[dict], gpus: int, gpus_per_engine: int
) -> dict[str, Any]:
    total_h = sum(r["_hours"] for r in rows)
    known = [r for r in rows if r["_useful"]["useful_fraction"] is not None]
    useful = total_useful([r["_useful"] for r in known])
    hours_range = total_useful(
        [
            {"useful_fraction": r["_hours"], "low": lo, "high": hi}
            for r in rows
            for lo, hi in [r["_hours_range"]]
        ]
    )
    adaptive_h = {m: sum(r["_hours"] * r["_shares"][m] for r in rows) for m in ("exact", "bayes")}
    engines = max(1, gpus // gpus_per_engine)
    jobs = target.num_shards
    overhead_h = (pilot["startup_overhead_s"] or 0.0) / 3600
    waves = math.ceil(jobs / engines)
    wall_h = waves * (total_h / gpus_per_engine / jobs + overhead_h)
    return {
        "pilot": {
            **{k: v for k, v in pilot.items() if k != "labels"},
            "rollouts_per_gpu_hour": _r(pilot["rollouts_per_gpu_hour"]),
            "gpu_hours": _hours(pilot["gpu_hours"]),
        },
        "pilot_labels": [_pilot_label(k, v) for k, v in pilot["labels"].items()],
        "target": {
            "run": target.run,
            "gpus": gpus,
            "gpus_per_engine": gpus_per_engine,
            "engines": engines,
            "rollout_jobs": jobs,
            "waves": waves,
        },
        "labels": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
        "total": {
            "tasks": sum(r["tasks"] for r in rows),
            "rollouts": sum(r["rollouts"] for r in rows),
            "gpu_hours": _hours(total_h),
            "gpu_hours_low": _hours(hours_range["low"]),
            "gpu_hours_high": _hours(hours_range["high"]),
            "gpu_hours_with_startup": _hours(total_h + jobs * overhead_h * gpus_per_engine),
            "gpu_hours_exact": _hours(adaptive_h["exact"]),
            "gpu_hours_bayes": _hours(adaptive_h["bayes"]),
            "wall_hours": _hours(wall_h),
            "useful_tasks": _r(useful["useful_fraction"], 1),
            "useful_tasks_low": _r(useful["low"], 1),
            "useful_tasks_high": _r(useful["high"], 1),
            "useful_tasks_per_gpu_hour": _r(useful["useful_fraction"] / total_h)
            if total_h
            else None,
            # labels without pilot data have no point value: left out of the useful totals
            "useful_tasks_exclude": [r["label"] for r in rows if r not in known],
        },
    }


_RAW_PILOT_KEYS = ("counts", "task_costs", "value_counts", "gpu_hours", "rollouts_per_gpu_hour")


def _pilot_label(label: str, v: dict[str, Any]) -> dict[str, Any]:
    """A pilot label for the output: rounded, counts summarized, useful fraction at its K."""
    pred = useful_prediction(v["counts"], v["num_repeats"])
    return {
        "label": label,
        **{a: b for a, b in v.items() if a not in _RAW_PILOT_KEYS},
        "gpu_hours": _hours(v["gpu_hours"]),
        "rollouts_per_gpu_hour": _r(v["rollouts_per_gpu_hour"]),
        "useful_fraction_at_pilot_k": _r(pred["useful_fraction"]),
        "useful_fraction_at_pilot_k_interval": [_r(pred["low"]), _r(pred["high"])],
        "useful_basis": pred["basis"],
    }


def _r(x: Any, nd: int = 3) -> float | None:
    return (
        None
        if x is None or (isinstance(x, float) and not math.isfinite(x)) or pd.isna(x)
        else round(float(x), nd)
    )


def _hours(x: float) -> float | None:
    """Hours to 5 significant figures: a small pilot's 0.0689 h and a sweep's 1,234.5 h keep
    the same relative precision (fixed decimals turned the total of 0.0689 h into 0.069)."""
    return None if not math.isfinite(x) else float(f"{x:.5g}")


def run_command(args: argparse.Namespace) -> int:
    """`rewardprof estimate`: print the estimate (markdown); with --out also write it."""
    target = load_config(args.target_config)
    tasks = {}
    for item in args.tasks or []:
        label, _, n = item.partition("=")
        tasks[label] = int(n)
    pilot = measure_pilot(args.run_dir, args.gpus_per_engine, args.cost_by)
    res = estimate(
        pilot,
        target,
        args.gpus,
        args.gpus_per_engine,
        tasks or None,
        Path(args.base_dir) if args.base_dir else None,
    )
    md = to_markdown(res)
    for warning in pilot["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "estimate.md").write_text(md)
        (out / "estimate.json").write_text(json.dumps(res, indent=2) + "\n")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `rewardprof estimate` (the command table is in rewardprof.cli)."""
    p.add_argument("run_dir", help="the pilot's results/<run>")
    p.add_argument("--target-config", required=True, help="the full sweep's config")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of the full sweep (default 8)")
    p.add_argument(
        "--gpus-per-engine",
        type=int,
        default=1,
        help="GPUs per vLLM engine, pilot and sweep alike (default 1)",
    )
    p.add_argument(
        "--tasks",
        action="append",
        metavar="LABEL=N",
        help="task count of a label instead of counting its source (repeatable)",
    )
    p.add_argument(
        "--cost-by",
        choices=["tokens", "latency"],
        default="tokens",
        help="split the pilot's GPU-hours over labels by output tokens (default) or "
        "by engine latency per sample",
    )
    p.add_argument("--base-dir", default=None, help="relative sources resolve here (default .)")
    p.add_argument("--out", default=None, help="also write estimate.md + estimate.json here")
