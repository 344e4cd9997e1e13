"""Progress: a tqdm bar in a terminal; plain periodic log lines otherwise (Slurm logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


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
