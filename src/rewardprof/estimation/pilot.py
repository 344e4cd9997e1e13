"""The pilot's measurements, from its rollouts, profile and rollout benchmarks (tools/estimate.py
reads them from the run directory):

* engine time: per rollout job (journal writer), the span from its first request to its last
  finished rollout: what the job held its GPUs for while generating (verification stalls
  included). Summed over jobs, times the GPUs per engine, this is the pilot's GPU-hours.
* per label: the GPU-hours are split over labels in proportion to their output tokens (+1 per
  rollout): a batched engine spends its time decoding, so long-output environments cost more.
  `cost_by="latency"` splits by engine latency per sample instead (a request's latency over its
  n samples), which also charges queueing behind other requests in flight. Rollouts per
  GPU-hour = the label's rollouts / its share of GPU-hours.
* startup overhead per job: estimation/startup.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rewardprof.estimation.rounding import rounded
from rewardprof.estimation.signal import value_counts_of
from rewardprof.estimation.startup import startup_overhead

# the rollout columns the measurements read
ROLLOUT_COLUMNS = [
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
# the profile columns they read
PROFILE_COLUMNS = ["label", "num_rollouts", "num_passed"]


def _label_of(report: dict[str, Any], task_index: np.ndarray) -> np.ndarray:
    starts = np.array([e["start"] for e in report["entries"]])
    idx = np.searchsorted(starts, task_index, side="right") - 1
    return np.array([e["label"] for e in report["entries"]], dtype=object)[np.clip(idx, 0, None)]


def _cost(r: pd.DataFrame, cost_by: str) -> pd.Series:
    """Each rollout's cost: its output tokens + 1, or its latency per sample."""
    if cost_by == "latency":
        return r["latency_s"].fillna(0) / r["request_n"].fillna(1).clip(lower=1)
    # a batched engine's time goes mostly to decoding: output tokens (+1 per rollout)
    return r["completion_tokens"].fillna(0).astype(float) + 1.0


def _label_measures(
    report: dict[str, Any], r: pd.DataFrame, prof: pd.DataFrame, gpu_h: float
) -> dict[str, dict]:
    """Per label of the pilot: its rollouts, share of the GPU-hours, per-task counts and costs."""
    total_cost = float(r["cost"].sum()) or 1.0
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
            "mean_output_tokens": rounded(mine["completion_tokens"].mean()),
            "gpu_hours": lab_gpu_h,  # rounded in the output only: the basis divides by it
            "cost_share": rounded(share),
            "rollouts_per_gpu_hour": len(mine) / lab_gpu_h if lab_gpu_h > 0 else None,
            "counts": counts,  # (scored rollouts, passes) per task
            # (summed cost, rollouts) per task: the GPU-hours interval's bootstrap
            "task_costs": list(zip(costs["cost"], costs["rollouts"], strict=True)),
            "value_counts": value_counts_of(mine),
        }
    return labels


def pilot_measures(
    run_dir: str,
    report: dict[str, Any],
    rollouts: pd.DataFrame,
    prof: pd.DataFrame,
    benchmarks: list[tuple[str, tuple[int, int], float]],
    gpus_per_engine: int = 1,
    cost_by: str = "tokens",
) -> dict[str, Any]:
    """The pilot (see the module doc): `report` the materialize report, `rollouts` and `prof`
    its ROLLOUT_COLUMNS and PROFILE_COLUMNS, `benchmarks` its rollout jobs' seconds
    (estimation/startup.py)."""
    r = rollouts.sort_values("started_at", kind="stable")
    spans = r.groupby("writer", sort=False).agg(
        first=("started_at", "min"), last=("finished_at", "max")
    )
    span_s = (spans["last"] - spans["first"]).clip(lower=0)
    engine_s = float(span_s.sum())
    gpu_h = engine_s * gpus_per_engine / 3600
    r["label"] = _label_of(report, r["task_index"].to_numpy())
    r["cost"] = _cost(r, cost_by)
    labels = _label_measures(report, r, prof, gpu_h)
    jobs = startup_overhead(benchmarks, spans["first"], spans["last"])
    return {
        "run_dir": run_dir,
        "rollouts": len(r),
        "jobs": jobs["jobs"],
        "attempts": jobs["attempts"],
        "interrupted_shards": jobs["interrupted_shards"],
        "warnings": [jobs["warning"]] if jobs["warning"] else [],
        "engine_hours": rounded(engine_s / 3600, 6),
        "gpu_hours": gpu_h,
        "gpus_per_engine": gpus_per_engine,
        "cost_by": cost_by,
        "rollouts_per_gpu_hour": len(r) / gpu_h if gpu_h > 0 else None,
        "output_tokens_per_gpu_hour": rounded(r["completion_tokens"].sum() / gpu_h)
        if gpu_h > 0
        else None,
        "startup_overhead_s": rounded(jobs["startup_overhead_s"]),
        "labels": labels,
    }
