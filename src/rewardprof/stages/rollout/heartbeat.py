"""A rollout job's heartbeat: `rollouts/status/<i>-of-<n>.json`, rewritten whole (atomically)
at the job's start, every `rollout.progress_interval_s` while it generates, and at its end.

It says what only the live job knows: its state (starting, running, done, failed, stopped),
where it runs, how fast it goes and the last error. How many rollouts are collected is the
journal's to say (`rewardprof status` reads both); a heartbeat older than a few intervals
while its state is still starting or running means the job died without a word (SIGKILL, a
lost node). The jobs themselves read only the heartbeats (cheap, never the journal) for the
whole run's progress line they print.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.redaction import redact
from rewardprof.store.journal import JournalLocked
from rewardprof.store.layout import RunLayout
from rewardprof.store.shards import parse_shard_name

LIVE_STATES = ("starting", "running")
FIRST_ROUND_PHASE = "first_round"  # bayes' first-round job (its own job before the prior)
# bayes: the shard's first round is journaled; its rounds wait for the prior over all shards
FIRST_ROUND_DONE = "first_round_done"
# the rate is measured over the last samples of `collected` (rollouts with a final record) the
# heartbeats took, across attempts: a resumed job shows the rate at once, not 0.00 rollouts/s
WINDOW_S = 600.0
WINDOW_SAMPLES = 40
log = logging.getLogger("rewardprof.stages.rollout")


def process_started_at() -> float:
    """When this process started (epoch seconds), so a job's startup includes its Python
    imports, as the wait for a shard still to start does; now where /proc cannot tell."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        # field 22 of /proc/self/stat, counted after the command name's closing parenthesis
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()
    return time.time() - max(age, 0.0)


class ShardHeartbeat:
    def __init__(self, layout: RunLayout, shard: int, num_shards: int, interval_s: float):
        self.layout = layout
        self.path = layout.shard_status(shard, num_shards)
        self.data: dict[str, Any] = {
            "shard": shard,
            "num_shards": num_shards,
            "state": "starting",
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": process_started_at(),
            "interval_s": interval_s,
            "window": _previous_window(self.path),
        }
        self.data["state_since"] = self.data["started_at"]
        self._lock = threading.Lock()
        self._warned = False

    @classmethod
    def for_output(cls, out: Path, interval_s: float) -> ShardHeartbeat | None:
        """The heartbeat of the job writing shard output `out` (None: not a run directory's
        `<i>-of-<n>.parquet`, e.g. a library call with its own paths)."""
        layout = RunLayout.of_shard_output(out)
        parsed = parse_shard_name(out.name)
        if layout is None or parsed is None:
            return None
        i, n = parsed
        return cls(layout, i, n, interval_s)

    @classmethod
    def for_first_round(cls, out: Path, interval_s: float) -> ShardHeartbeat | None:
        """The heartbeat of bayes' first-round job of the shard whose first-round summary is
        `out`: the shard's own heartbeat file, with phase first_round (status shows it)."""
        layout = RunLayout.of_first_round_output(out)
        parsed = parse_shard_name(out.name, "json")
        if layout is None or parsed is None:
            return None
        beat = cls(layout, *parsed, interval_s)
        beat.data["phase"] = FIRST_ROUND_PHASE
        return beat

    def write(self, **fields: Any) -> None:
        """Update the fields and rewrite the file. A heartbeat that cannot be written (a full
        or flaky filesystem) is logged once and never fails the job: the journal is what
        counts."""
        with self._lock:
            now = time.time()
            if "state" in fields and fields["state"] != self.data.get("state"):
                self.data["state_since"] = now
            if "collected" in fields:
                sample = [round(now, 3), int(fields["collected"]), self.data["pid"]]
                window = [s for s in self.data["window"] if now - s[0] <= WINDOW_S]
                self.data["window"] = [*window, sample][-WINDOW_SAMPLES:]
            self.data.update(fields, updated_at=now)
            # errors quote what servers answered: never a secret in the file (core.redaction)
            shown = {k: redact(v) if isinstance(v, str) else v for k, v in self.data.items()}
            try:
                write_json_atomic(self.path, shown)
            except OSError as exc:
                if not self._warned:
                    log.warning(
                        "%s: heartbeat not written (%s); status may call it lost", self.path, exc
                    )
                    self._warned = True

    def beat_while_starting(self) -> threading.Thread:
        """Rewrite the heartbeat every interval from a thread while the state is `starting`
        (serve mode loads the engine for minutes before the first rollout, and the job is
        alive all that time); the thread ends by itself once the state moves on."""

        def loop() -> None:
            while True:
                time.sleep(self.data["interval_s"])
                if self.data.get("state") != "starting":
                    return
                self.write()

        thread = threading.Thread(target=loop, name="heartbeat", daemon=True)
        thread.start()
        return thread

    def run_progress_line(self) -> str:
        """One line on the whole run's rollouts, from every shard's heartbeat (see module)."""
        layout = self.layout
        beats = read_heartbeats(layout, self.data["num_shards"])
        try:
            report = json.loads(layout.materialize_report.read_text())
            expected = int(report["num_rollouts_expected"])
        except (OSError, ValueError, KeyError, TypeError):
            expected = sum(int(b.get("expected") or 0) for b in beats.values())
        now = time.time()
        done = sum(collected(b) for b in beats.values())
        live = [b for b in beats.values() if is_live(b, now)]
        rate = sum(rates(b)[0] for b in live)
        tokens = sum(rates(b)[1] for b in live)
        failed = sum(int(b.get("failed") or 0) for b in beats.values())
        pct = 100 * done / expected if expected else 0.0
        return (
            f"rewardprof: rollouts {done}/{expected} ({pct:.1f}%), "
            f"{len(live)} of {self.data['num_shards']} shards running, {rate:.2f} rollouts/s, "
            f"{tokens:.0f} tokens/s, {failed} failed, ETA {eta_text(expected - done, rate)}"
        )


def _previous_window(path: Path) -> list[list[float]]:
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


def heartbeat_layouts(layout: RunLayout) -> dict[int, float]:
    """Shard counts with heartbeats in this run directory -> the newest one's mtime."""
    found: dict[int, float] = {}
    status_dir = layout.shard_status(0, 1).parent
    if status_dir.is_dir():
        for p in status_dir.iterdir():
            parsed = parse_shard_name(p.name, "json")
            if parsed:
                found[parsed[1]] = max(found.get(parsed[1], 0.0), p.stat().st_mtime)
    return found


@contextlib.contextmanager
def beating(beat: ShardHeartbeat | None) -> Iterator[None]:
    """A shard job's heartbeat around its work (the rollout job's, bayes' first-round job's):
    `starting`, rewritten from a thread until the state moves on (serve mode: the engine takes
    minutes to load); on the way out, `refused` when another job holds the shard (the heartbeat
    is that job's: it rewrites it next tick), `stopped` on SIGTERM (scancel, Snakemake stopping:
    SystemExit) or Ctrl-C, else `failed` with the error line. The job writes its own end state
    when the work returns."""
    if beat is None:
        yield
        return
    beat.write(state="starting")
    beat.beat_while_starting()
    try:
        yield
    except JournalLocked:
        beat.data["state"] = "refused"
        raise
    except BaseException as exc:
        state = "stopped" if isinstance(exc, (SystemExit, KeyboardInterrupt)) else "failed"
        beat.write(state=state, error=" ".join(f"{type(exc).__name__}: {exc}".split())[:500])
        raise


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
