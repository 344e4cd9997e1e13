"""rollout: generate and verify the rollouts a shard's work asks for (work.py).

`ShardRun.generate` puts the parts together for the engine the job opened: the requests
(request_bodies.py) go out through the engine's link (engine_link.py) from a pool of workers
(sampling_loop.py), each unit sampled by its environment's kind of sampler (sampling.py: a
completion or an episode), and every finished rollout goes to the journal before anything else
happens to it (records.py; shard_job.py writes the output from the journal once every
(task_index, rollout_index) is ok or failed for good).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import signal
import socket
import time
from collections import Counter
from pathlib import Path

import pandas as pd

from rewardprof.core.config import Config
from rewardprof.engine.liveness import run_while_alive
from rewardprof.engine.session import Endpoint
from rewardprof.environments import Environment, VerifyContext, make_environment
from rewardprof.environments.acting import ActingEnvironment
from rewardprof.stages.rollout.completions import CompletionSampler
from rewardprof.stages.rollout.engine_link import EngineLink
from rewardprof.stages.rollout.episodes import EpisodeSampler
from rewardprof.stages.rollout.progress import Progress
from rewardprof.stages.rollout.records import Journaling, RecordAssembly, UnitTally
from rewardprof.stages.rollout.request_bodies import RequestBuilder
from rewardprof.stages.rollout.sampling import SamplingTools, UnitSampler
from rewardprof.stages.rollout.sampling_loop import SamplingLoop
from rewardprof.stages.rollout.shard_tasks import TaskText, Unit
from rewardprof.stages.rollout.verifying import make_pool, warm_worker
from rewardprof.stages.rollout.work import FixedWork, RoundsWork
from rewardprof.store.journal import JournalWriter
from rewardprof.store.seeds import gen_key

Work = FixedWork | RoundsWork


_WRITER_SEQ = itertools.count()


class ShardRun:
    """A shard's run: its tasks and their environments, the generation's key (which journal
    records count), this job's writer id, and what this job sampled (`counts` by status,
    `failed_here`); `missing` reads the journal, `generate` samples a work's units."""

    def __init__(
        self,
        cfg: Config,
        model: str,
        tasks: pd.DataFrame,
        journal_dir: Path,
        shard_tag: str,
        tasks_path: Path | None = None,
        phase: str = "",
    ):
        """`model`: what the requests name (gen_key, known before any engine starts); `tasks`:
        task_index, task_id, label, environment, num_repeats, and the messages and row columns
        or `tasks_path` to read them from (only for tasks still needing rollouts)."""
        self.cfg, self.model, self.tasks = cfg, model, tasks
        self.tasks_path = tasks_path
        self._labels = tasks["label"].tolist()  # a list for the hot path (not DataFrame.iloc)
        self.journal_dir, self.shard_tag = journal_dir, shard_tag
        self.gen_key = gen_key(cfg, model)
        # unique per writer, even two in a process in a second; `phase`: store.shards.FIRST_ROUND
        self.writer_id = (
            f"{shard_tag}_{int(time.time())}-{socket.gethostname()}-"
            f"{os.getpid()}-{next(_WRITER_SEQ)}{f'-{phase}' if phase else ''}"
        )
        self.envs: dict[str, Environment] = {}
        self._env_specs: dict[str, tuple[str, dict]] = {}
        options = {e.label: e.options for e in cfg.entries}
        for label, env_name in (
            tasks[["label", "environment"]].drop_duplicates().itertuples(index=False)
        ):
            if label not in options:
                raise ValueError(
                    f"tasks table has label {label!r} that is not in the config; re-run materialize"
                )
            self.envs[label] = make_environment(env_name, options[label])
            self._env_specs[label] = (env_name, options[label])
        self.counts: Counter[str] = Counter()
        self.failed_here: set[tuple[int, int]] = set()  # (task_index, rollout_index), this job

    async def generate(self, endpoint: Endpoint, work: Work, progress: Progress) -> None:
        """Sample what `work` asks for from `endpoint` until it is finished (sampling_loop.py);
        whatever finished is journaled, also on SIGTERM or an error."""
        r = self.cfg.rollout
        text = TaskText(self.tasks, self.tasks_path, work.positions())
        writer = JournalWriter(
            self.journal_dir, self.writer_id, r.segment_interval_s, r.segment_max_records
        )
        pool = make_pool(r.verify_workers)
        self._warm_pool(pool, r.verify_workers)
        link = EngineLink(self.cfg, endpoint)
        if link.balancer is not None:
            progress.replicas = link.balancer.snapshot
        ticking = asyncio.ensure_future(progress.ticking())
        try:
            async with link.client() as client:
                ctx = VerifyContext(pool=pool, timeout_s=r.verify_timeout_s, http_session=None)
                requests = RequestBuilder(self.cfg, endpoint, text, self.tasks["task_id"].tolist())
                records = RecordAssembly(endpoint, self.gen_key, self.writer_id, self.tasks)
                samplers = self._samplers(SamplingTools(client, requests, records, ctx))
                journaling = Journaling(writer, work, self.counts, self.failed_here)
                sample_unit = functools.partial(
                    self._sample_unit, samplers=samplers, journaling=journaling, progress=progress
                )
                loop = SamplingLoop(
                    work, sample_unit, text.read, progress, r.concurrency, link.admission
                )
                what = f"{self.shard_tag}: engine {endpoint.identity}"
                await run_while_alive(loop.run(), link.liveness, what)
        finally:
            ticking.cancel()
            writer.close()  # whatever finished is kept, also on SIGTERM or an error
            for env in self.envs.values():
                await env.aclose()
            pool.stop()
            pool.join(timeout=10)

    def _samplers(self, tools: SamplingTools) -> dict[str, UnitSampler]:
        """Each label's sampler: an episode per rollout where the environment acts, else one
        completion request per unit."""
        return {
            label: EpisodeSampler(env, tools)
            if isinstance(env, ActingEnvironment)
            else CompletionSampler(env, tools)
            for label, env in self.envs.items()
        }

    async def _sample_unit(
        self,
        unit: Unit,
        samplers: dict[str, UnitSampler],
        journaling: Journaling,
        progress: Progress,
    ) -> None:
        """One unit by its label's sampler, each record journaled as it comes; then progress."""
        tally = UnitTally()
        sampler = samplers[self._labels[unit.pos]]
        detail = await sampler.sample(unit, lambda rec: journaling.keep(rec, unit.pos, tally))
        kinds = tally.failures
        progress.update(len(unit.indices), kinds.total(), tally.tokens, kinds, detail)

    def _warm_pool(self, pool, workers: int) -> None:
        """Import each environment's verifier library in the workers now, in the background,
        while the first requests are in flight: otherwise the first verifications pay it
        (math-verify ~1-2 s, if-verifiable ~3 s per worker). Not awaited; failures ignored."""
        kinds = {
            (name, json.dumps(options, sort_keys=True, default=str))
            for name, options in self._env_specs.values()
        }
        for name, options in sorted(kinds):
            for _ in range(workers):
                pool.schedule(warm_worker, args=(name, options))


async def with_sigterm(coro) -> None:
    """SIGTERM (scancel, Snakemake stopping) cancels the work so the journal is closed."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro)
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
