"""The rollout jobs' heartbeats, `rollouts/status/<i>-of-<n>.json` (RunLayout.shard_status), as
their readers see them: `rewardprof status`, the jobs' whole-run progress line. The file is
written by the job's ShardHeartbeat (stages/rollout/heartbeat.py); what a reader derives from
one (live or not, rates, ETA) is here, so no reader reaches into the rollout stage.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rewardprof.store.layout import RunLayout

LIVE_STATES = ("starting", "running")
FIRST_ROUND_PHASE = "first_round"  # bayes' first-round job (its own job before the prior)
# bayes: the shard's first round is journaled; its rounds wait for the prior over all shards
FIRST_ROUND_DONE = "first_round_done"
# the rate is measured over the last samples of `collected` (rollouts with a final record) the
# heartbeats took, across attempts: a resumed job shows the rate at once, not 0.00 rollouts/s
WINDOW_S = 600.0
WINDOW_SAMPLES = 40


def previous_window(path: Path) -> list[list[float]]:
    """The rate samples of the shard's previous attempt (its heartbeat file), if any."""
    try:
        window = json.loads(path.read_text()).get("window")
    except (OSError, ValueError, AttributeError):
        return []
    return [s for s in window if isinstance(s, list) and len(s) == 3] if window else []


def window_rate(beat: dict[str, Any]) -> float | None:
    """Rollouts/s over the heartbeat's window: the sum of the counts' increases over the sum of
    the time between samples of the same attempt (the gap of a kill and restart is not time
    spent generating). None: fewer than two samples of one attempt."""
    window = beat.get("window") or []
    gained = spent = 0.0
    for (t0, c0, p0), (t1, c1, p1) in zip(window, window[1:], strict=False):
        if p0 == p1 and t1 > t0:
            gained += max(c1 - c0, 0)
            spent += t1 - t0
    return gained / spent if spent > 0 else None


def read_heartbeats(layout: RunLayout, n: int) -> dict[int, dict[str, Any]]:
    """shard index -> its last heartbeat, for the shards of layout `n` that wrote one."""
    out: dict[int, dict[str, Any]] = {}
    for i in range(n):
        try:
            data = json.loads(layout.shard_status(i, n).read_text())
        except (OSError, ValueError):  # not started yet (or written by no job of this version)
            continue
        if isinstance(data, dict):
            out[i] = data
    return out


def is_live(beat: dict[str, Any], now: float) -> bool:
    """Starting or running, and heard from within three intervals (plus a minute of slack
    for a slow shared filesystem)."""
    if beat.get("state") not in LIVE_STATES:
        return False
    age = now - float(beat.get("updated_at") or 0)
    return age <= 3 * float(beat.get("interval_s") or 30) + 60


def collected(beat: dict[str, Any]) -> int:
    """Rollouts of the shard with a final record, as the job last saw them."""
    return int(beat.get("journaled_ok") or 0) + int(beat.get("generated") or 0)


def rates(beat: dict[str, Any]) -> tuple[float, float]:
    """(rollouts/s, completion tokens/s): rollouts over the sliding window (which a resumed
    job inherits), else since the job started generating; tokens since it started."""
    since = beat.get("generating_since")
    windowed = window_rate(beat)
    if not since:
        return windowed or 0.0, 0.0
    elapsed = max(float(beat.get("updated_at") or since) - float(since), 1e-9)
    rate = int(beat.get("generated") or 0) / elapsed
    return (rate if windowed is None else windowed), int(beat.get("tokens") or 0) / elapsed


def eta_text(remaining: int, rate: float) -> str:
    if remaining <= 0:
        return "0s"
    if rate <= 0:
        return "?"
    s = math.ceil(remaining / rate)  # rounded up: work left never shows as "0s"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
