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
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.redaction import redact
from rewardprof.store.heartbeats import (
    WINDOW_S,
    WINDOW_SAMPLES,
    collected,
    eta_text,
    is_live,
    previous_window,
    rates,
    read_heartbeats,
)
from rewardprof.store.journal import JournalLocked
from rewardprof.store.layout import RunLayout
from rewardprof.store.shards import ShardPosition

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
            "window": previous_window(self.path),
        }
        self.data["state_since"] = self.data["started_at"]
        self._lock = threading.Lock()
        self._warned = False

    @classmethod
    def for_shard(
        cls, run_dir: RunLayout | None, shard: ShardPosition, interval_s: float, phase: str = ""
    ) -> ShardHeartbeat | None:
        """The heartbeat of shard `shard`'s job in run directory `run_dir` (None: no run
        directory given, e.g. a library call with its own paths). `phase` "first_round":
        bayes' first-round job, which writes the shard's own heartbeat file (status shows it)."""
        if run_dir is None:
            return None
        beat = cls(run_dir, shard.index, shard.count, interval_s)
        if phase:
            beat.data["phase"] = phase
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
