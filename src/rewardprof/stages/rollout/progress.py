"""Progress: a tqdm bar in a terminal; plain periodic log lines otherwise (Slurm logs, CI)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

from rewardprof.stages.rollout.seeds import SEED_SCHEME

log = logging.getLogger("rewardprof.stages.rollout")


def log_start(shard_tag: str, tasks: int, missing: int, info: dict[str, Any]) -> None:
    """What a shard's job found in the journal when it started."""
    log.info(
        "%s: %d tasks, %d rollouts already journaled, %d to generate "
        "(stale records ignored: %d, re-keyed: %d, torn lines skipped: %d)",
        shard_tag,
        tasks,
        info["journaled_ok"],
        missing,
        info["stale"],
        info["rekeyed"],
        info["torn_lines"],
    )
    if info["stale_seed_scheme_1"]:
        log.warning(
            "%s: %d of the stale records were made under seed scheme 1 (seed scheme "
            "now %d): they are not reused, their rollouts are generated again with the "
            "new seeds (docs/robustness.md)",
            shard_tag,
            info["stale_seed_scheme_1"],
            SEED_SCHEME,
        )


class Progress:
    def __init__(self, total: int, label: str, interval_s: float, stream: TextIO | None = None):
        self.total, self.label, self.interval_s = total, label, interval_s
        self.stream = stream or sys.stderr
        self.done = self.failed = self.tokens = 0
        self.started = self._last = time.monotonic()
        self._bar = None
        if self.stream.isatty() and total:
            from tqdm import tqdm  # lazy: only a terminal draws a bar

            self._bar = tqdm(
                total=total,
                desc=label,
                unit="rollout",
                file=self.stream,
                dynamic_ncols=True,
                smoothing=0.1,
            )

    def update(self, n: int, failed: int, tokens: int) -> None:
        self.done += n
        self.failed += failed
        self.tokens += tokens
        if self._bar is not None:
            self._bar.update(n)
            elapsed = max(time.monotonic() - self.started, 1e-9)
            self._bar.set_postfix(
                tok_s=f"{self.tokens / elapsed:.0f}", failed=self.failed, refresh=False
            )
            return
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            self.line()

    def line(self) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta_s = f"{eta:.0f}s" if eta != float("inf") else "?"
        print(
            f"[{self.label}] {self.done}/{self.total} rollouts, {rate:.2f} rollouts/s, "
            f"{self.tokens / elapsed:.1f} tokens/s, {self.failed} failed, ETA {eta_s}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self.line()
