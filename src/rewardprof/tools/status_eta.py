"""What `rewardprof status` derives from the shards' heartbeats beyond counts: how long each
shard has been in its state, and the run's ETA including the shards still to start.

The ETA is a small schedule, not remaining / rate: the live shards (starting or running) hold
one slot each and finish after their own remaining work at their own rate (a starting one first
waits out the run's measured startup); every shard still pending then takes the first slot that
frees up, pays the startup (engine load) measured on this run's jobs, and generates at the mean
per-shard rate. Serve mode on one machine runs one engine at a time, so shards left to start
can be most of the wait; on a cluster the slots run side by side.
"""

from __future__ import annotations

import heapq
import statistics
from typing import Any

from rewardprof.store.heartbeats import eta_text


def state_elapsed(state: str, beat: dict[str, Any], now: float) -> float | None:
    """Seconds the shard has been in `state` (live shards), or the job's whole time (a shard
    that ended: done, failed, stopped); None without a heartbeat."""
    if not beat:
        return None
    started = float(beat.get("started_at") or 0) or None
    if state in ("starting", "running", "first_round"):
        since = beat.get("state_since") or (
            beat.get("generating_since") if state != "starting" else started
        )
        return max(now - float(since), 0.0) if since else None
    ended = float(beat.get("updated_at") or 0) or None
    return max(ended - started, 0.0) if started and ended else None


def startup_s(beats: list[dict[str, Any]]) -> float | None:
    """Median seconds from a job's start to its first rollout (engine load, journal read), over
    this run's jobs that got that far."""
    spans = [
        float(b["generating_since"]) - float(b["started_at"])
        for b in beats
        if b.get("generating_since") and b.get("started_at")
    ]
    return statistics.median(spans) if spans else None


def run_eta_s(shards: list[dict[str, Any]], startup: float | None, now: float) -> float | None:
    """Seconds until every shard is done (module docstring); None when no rate is known yet.
    `shards`: status rows with state, done, expected, rollouts_per_s, elapsed_s."""
    rates = [s["rollouts_per_s"] for s in shards if s["rollouts_per_s"] > 0]
    if not rates:
        return None
    mean_rate, startup = statistics.fmean(rates), startup or 0.0
    slots: list[float] = []
    pending: list[float] = []
    for s in shards:
        left = max((s["expected"] or 0) - s["done"], 0)
        if s["state"] == "done":
            continue
        if s["state"] in ("running", "first_round"):
            slots.append(left / (s["rollouts_per_s"] or mean_rate))
        elif s["state"] == "starting":
            wait = max(startup - (s["elapsed_s"] or 0.0), 0.0)
            slots.append(wait + left / mean_rate)
        elif left:  # pending, or stopped and to be rerun
            pending.append(startup + left / mean_rate)
    if not slots and not pending:
        return 0.0
    slots = slots or [0.0]
    heapq.heapify(slots)
    for need in pending:
        heapq.heappush(slots, heapq.heappop(slots) + need)
    return max(slots)


def duration_text(seconds: float | None) -> str:
    """12s, 4m05s, 1h02m; '-' for unknown."""
    if seconds is None:
        return "-"
    return eta_text(max(int(round(seconds)), 1), 1.0) if seconds >= 0.5 else "0s"
