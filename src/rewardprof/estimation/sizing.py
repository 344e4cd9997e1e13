"""The sweep's size from the pilot's measurements (estimation/pilot.py) and the target config:
per label, its rollouts, GPU-hours (fixed K and adaptive, with an interval) and useful tasks;
the totals and the wall time on the sweep's GPUs.

Labels absent from the pilot borrow the rate of pilot labels with the same environment, else the
pilot's overall rate (the output says which). Nothing is rounded before it is divided; only the
output is (estimation/rounding.py).
"""

from __future__ import annotations

import math
from typing import Any

from rewardprof.core.config import Config
from rewardprof.estimation.bootstrap import cost_interval, total_useful
from rewardprof.estimation.rounding import round_hours, rounded
from rewardprof.estimation.signal import adaptive_rollouts, group_value_counts, useful_prediction


def size_sweep(
    pilot: dict[str, Any],
    target: Config,
    n_tasks: dict[str, int],
    gpus: int,
    gpus_per_engine: int = 1,
) -> dict[str, Any]:
    """The estimate of `target` (`n_tasks`: each label's tasks) from the pilot's measurements."""
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
        "rollouts_per_gpu_hour": rounded(rate),
        "gpu_hours": round_hours(hours),
        "gpu_hours_low": round_hours(hours * cost_lo),
        "gpu_hours_high": round_hours(hours * cost_hi),
        **{f"gpu_hours_{m}": round_hours(hours * share) for m, share in shares.items()},
        **{f"rollouts_{m}": round(rollouts * share) for m, share in shares.items()},
        "useful_basis": pred["basis"],
        "useful_fraction": rounded(pred["useful_fraction"]),
        "useful_fraction_low": rounded(pred["low"]),
        "useful_fraction_high": rounded(pred["high"]),
        "useful_tasks": rounded(point, 1),
        "useful_tasks_low": rounded(useful["low"], 1),
        "useful_tasks_high": rounded(useful["high"], 1),
        "useful_tasks_per_gpu_hour": rounded(point / hours)
        if hours and point is not None
        else None,
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
            "rollouts_per_gpu_hour": rounded(pilot["rollouts_per_gpu_hour"]),
            "gpu_hours": round_hours(pilot["gpu_hours"]),
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
            "gpu_hours": round_hours(total_h),
            "gpu_hours_low": round_hours(hours_range["low"]),
            "gpu_hours_high": round_hours(hours_range["high"]),
            "gpu_hours_with_startup": round_hours(total_h + jobs * overhead_h * gpus_per_engine),
            "gpu_hours_exact": round_hours(adaptive_h["exact"]),
            "gpu_hours_bayes": round_hours(adaptive_h["bayes"]),
            "wall_hours": round_hours(wall_h),
            "useful_tasks": rounded(useful["useful_fraction"], 1),
            "useful_tasks_low": rounded(useful["low"], 1),
            "useful_tasks_high": rounded(useful["high"], 1),
            "useful_tasks_per_gpu_hour": rounded(useful["useful_fraction"] / total_h)
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
        "gpu_hours": round_hours(v["gpu_hours"]),
        "rollouts_per_gpu_hour": rounded(v["rollouts_per_gpu_hour"]),
        "useful_fraction_at_pilot_k": rounded(pred["useful_fraction"]),
        "useful_fraction_at_pilot_k_interval": [rounded(pred["low"]), rounded(pred["high"])],
        "useful_basis": pred["basis"],
    }
