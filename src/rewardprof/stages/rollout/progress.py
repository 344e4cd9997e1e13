"""Progress of a rollout job, in three places:

- its log (stderr): a tqdm bar on a terminal; otherwise a plain line every
  `rollout.progress_interval_s`, also while no rollout finishes (a Slurm log shows the job is
  alive);
- its heartbeat (`rollouts/status/<i>-of-<n>.json`, see heartbeat.py) at the same interval;
- stdout, when stderr is not a terminal: one line on the whole run at the same interval.
  Snakemake passes a job's stdout through to the controller's terminal (the rules send stderr
  to the job's log), so `snakemake --cores all` shows the sweep's progress while rollout jobs
  run; on Slurm that line goes to the job's Slurm log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from rewardprof.core.kinds import TokensSource
from rewardprof.stages.rollout.heartbeat import ShardHeartbeat
from rewardprof.store.heartbeats import eta_text

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


def peak_rss_mb() -> float:
    """The largest resident set this process has had, in MB (Linux counts ru_maxrss in KiB):
    what a Slurm job's memory request must cover for the client."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def log_done(shard_tag: str, summary: dict[str, Any]) -> None:
    """A shard's counts by status when its output is written; a warning if token counts are
    estimates."""
    log.info(
        "%s: done: %s; peak memory of this job %.0f MB",
        shard_tag,
        json.dumps(summary["by_status"]),
        peak_rss_mb(),
    )
    sources = summary["completion_tokens_source"]
    if sources.get(TokensSource.APPORTIONED):
        log.warning(
            "%s: %d of %d rollouts have completion_tokens apportioned by text length (the "
            "server sent no token_ids): an estimate that depends on engine.max_n; set "
            "engine.return_token_ids: true if the endpoint is vLLM",
            shard_tag,
            sources[TokensSource.APPORTIONED],
            summary["present"],
        )


class Progress:
    def __init__(
        self,
        total: int,
        label: str,
        interval_s: float,
        stream: TextIO | None = None,
        heartbeat: ShardHeartbeat | None = None,
        run_stream: TextIO | None = None,
    ):
        self.total, self.label, self.interval_s = total, label, interval_s
        self.stream = stream or sys.stderr
        self.heartbeat = heartbeat
        # several replicas: their state for the heartbeat (engine/balancer.py snapshot)
        self.replicas: Callable[[], list[dict[str, Any]]] | None = None
        self.done = self.failed = self.tokens = 0
        self.failures: Counter[str] = Counter()
        self.last_error: str | None = None
        self.started = self._last = time.monotonic()
        self.started_wall = time.time()
        self._bar = None
        on_tty = self.stream.isatty()
        # the whole run's line goes to stdout only when the log is a file (under Snakemake)
        self.run_stream = run_stream if run_stream is not None else (None if on_tty else sys.stdout)
        if on_tty and total:
            from tqdm import tqdm  # lazy: only a terminal draws a bar

            self._bar = tqdm(
                total=total,
                desc=label,
                unit="rollout",
                file=self.stream,
                dynamic_ncols=True,
                smoothing=0.1,
            )
        self.beat("running")

    def add(self, n: int) -> None:
        """`n` more rollouts to generate: adaptive sampling plans a task's next round when its
        last one returned, so the total grows while the job runs."""
        self.total += n
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def update(
        self, n: int, failed: int, tokens: int, kinds: Counter[str] | None = None, error=None
    ) -> None:
        self.done += n
        self.failed += failed
        self.tokens += tokens
        if kinds:
            self.failures.update(kinds)
        if error:
            self.last_error = error
        if self._bar is not None:
            self._bar.update(n)
            elapsed = max(time.monotonic() - self.started, 1e-9)
            self._bar.set_postfix(
                tok_s=f"{self.tokens / elapsed:.0f}", failed=self.failed, refresh=False
            )

    async def ticking(self) -> None:
        """Every interval: the log line, the heartbeat and the run's line (cancel to stop)."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.tick()

    def tick(self) -> None:
        if self._bar is None:
            self.line()
        self.beat("running")
        if self.run_stream is not None and self.heartbeat is not None:
            # the shard's numbers as status shows them: what earlier attempts journaled too
            data = self.heartbeat.data
            expected = data.get("expected") or self.total
            print(
                f"{self.heartbeat.run_progress_line()} "
                f"[{self.label}: {self.collected()}/{expected}]",
                file=self.run_stream,
                flush=True,
            )

    def collected(self) -> int:
        """The shard's rollouts with a final record: journaled before this attempt + its own."""
        journaled = int(self.heartbeat.data.get("journaled_ok") or 0) if self.heartbeat else 0
        return journaled + self.done

    def beat(self, state: str, **fields) -> None:
        if self.heartbeat is None:
            return
        self.heartbeat.write(
            state=state,
            generating_since=self.started_wall,
            todo=self.total,
            generated=self.done,
            failed=self.failed,
            tokens=self.tokens,
            failures=dict(self.failures),
            last_error=self.last_error,
            collected=self.collected(),
            **({"replicas": self.replicas()} if self.replicas is not None else {}),
            **fields,
        )

    def line(self) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        expected = self.heartbeat.data.get("expected") if self.heartbeat else None
        shard = f" (shard: {self.collected()}/{expected})" if expected else ""
        print(
            f"[{self.label}] {self.done}/{self.total} rollouts, {rate:.2f} rollouts/s, "
            f"{self.tokens / elapsed:.1f} tokens/s, {self.failed} failed, "
            f"ETA {eta_text(self.total - self.done, rate)}{shard}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self.line()
        self.beat("running")  # the final counts; the stage then says done or failed
