"""rollout: generate and verify the rollouts a shard's work asks for (work.py).

A pool of `concurrency` workers (with several replicas: as many as they admit, growing with
the fleet) pulls request units from a bounded queue (never one coroutine per rollout), so
memory stays flat however large the shard. Every finished rollout goes to the journal before
anything else happens to it (shard_job.py writes the output from the journal once every
(task_index, rollout_index) is ok or failed for good).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.config import Config
from rewardprof.core.kinds import OK, FailureKind
from rewardprof.engine.balancer import make_balancer
from rewardprof.engine.client import ChatClient, ChatResult
from rewardprof.engine.http_retry import client_session
from rewardprof.engine.liveness import EndpointLiveness, run_while_alive
from rewardprof.engine.session import Endpoint
from rewardprof.environments import Environment, VerifyContext, make_environment
from rewardprof.environments.acting import ActingEnvironment
from rewardprof.stages.rollout.episodes import engine_chat, episode_fields
from rewardprof.stages.rollout.progress import Progress
from rewardprof.stages.rollout.shard_tasks import Unit, missing_indices, read_text
from rewardprof.stages.rollout.verifying import make_pool, verify, warm_worker
from rewardprof.stages.rollout.work import FixedWork, RoundsWork
from rewardprof.store.collected import resolve
from rewardprof.store.journal import JournalWriter, scan_journal
from rewardprof.store.record import journal_record
from rewardprof.store.seeds import (
    gen_key,
    legacy_gen_key,
    task_seed,
    wants_token_ids,
)

log = logging.getLogger("rewardprof.stages.rollout")

Work = FixedWork | RoundsWork


_WRITER_SEQ = itertools.count()


class ShardRun:
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
        self.endpoint: Endpoint | None = None  # the engine, while `generate` runs
        self.tasks_path = tasks_path
        # plain lists for the hot path (DataFrame.iloc costs ~100 us per call)
        self._task_index = tasks["task_index"].tolist()
        self._task_id = tasks["task_id"].tolist()
        self._label = tasks["label"].tolist()
        self._text: dict[int, tuple[str, str]] = {}
        self.journal_dir, self.shard_tag = journal_dir, shard_tag
        self.gen_key = gen_key(cfg, model)
        self._token_ids = wants_token_ids(cfg)
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

    def missing(self) -> tuple[list[list[int]], dict[str, int]]:
        scan = scan_journal(self.journal_dir)
        col = resolve(scan, self.tasks[["task_index", "task_id", "num_repeats"]], self.gen_key)
        ok = col.winners[col.winners["status"] == OK]
        missing = missing_indices(self.tasks, ok)
        info = {
            "journaled_ok": len(ok),
            "stale": col.stale,
            "rekeyed": col.rekeyed,
            "torn_lines": scan.torn_lines,
            "stale_seed_scheme_1": col.stale_keys.get(legacy_gen_key(self.cfg, self.model), 0),
        }
        return missing, info

    def _body(self, messages: list[dict], n: int, seed: int) -> dict[str, Any]:
        s = self.cfg.sampling
        body = {
            "model": self.endpoint.model,
            "messages": messages,
            "n": n,
            "seed": seed,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
        }
        if self._token_ids:
            body["return_token_ids"] = True  # exact per-sample counts, whatever n is
        body.update(self.cfg.engine.extra_body)
        return body

    async def _do_unit(
        self,
        unit: Unit,
        client: ChatClient,
        ctx: VerifyContext,
        writer: JournalWriter,
        progress: Progress,
        work: Work,
    ) -> None:
        if isinstance(env := self.envs[self._label[unit.pos]], ActingEnvironment):
            kinds: Counter[str] = Counter()
            records = await self._episode_records(unit, env, client, ctx)
            for rec in records:
                self._journal(rec, unit.pos, writer, work, kinds)
            tokens = sum(rec.get("completion_tokens") or 0 for rec in records)
            return progress.update(len(unit.indices), kinds.total(), tokens, kinds, None)
        task_id, label = self._task_id[unit.pos], self._label[unit.pos]
        messages, row_json = self._text[unit.pos]
        seed0 = task_seed(self.cfg.sampling.seed, task_id)
        first = unit.indices[0]
        started = time.time()
        result: ChatResult = await client.complete(
            self._body(json.loads(messages), len(unit.indices), seed0 + first)
        )
        base = {
            "task_index": int(self._task_index[unit.pos]),
            "task_id": task_id,
            "label": label,
            "attempt": result.attempts,
            "request_n": len(unit.indices),
            "gen_key": self.gen_key,
            "model": self.endpoint.model,
            "engine": self.endpoint.identity,
            "started_at": started,
            "latency_s": result.latency_s,
            "prompt_tokens": result.prompt_tokens,
            "writer": self.writer_id,
        }
        env = self.envs[label]
        row = json.loads(row_json)
        got = {c.index: c for c in result.choices}
        kinds: Counter[str] = Counter()
        tokens = 0
        for j, r in enumerate(unit.indices):
            rec = dict(base, rollout_index=r, seed=seed0 + r)
            choice = got.get(j)
            if choice is None:
                rec.update(
                    status=result.failure or FailureKind.ENGINE_ERROR,
                    error=result.detail,
                    finished_at=time.time(),
                )
            else:
                t0 = time.monotonic()
                verdict = await verify(env, row, choice.text, ctx)
                rec.update(
                    status=verdict.status,
                    reward=verdict.reward,
                    error=verdict.detail,
                    finish_reason=choice.finish_reason,
                    completion=choice.text,
                    completion_tokens=choice.completion_tokens,
                    completion_tokens_source=choice.tokens_source,
                    extras=json.dumps(verdict.extras, ensure_ascii=False, default=str),
                    verify_s=time.monotonic() - t0,
                    finished_at=time.time(),
                )
                tokens += choice.completion_tokens or 0
            self._journal(rec, unit.pos, writer, work, kinds)
        progress.update(len(unit.indices), kinds.total(), tokens, kinds, result.detail)

    def _journal(
        self, rec: dict, pos: int, writer: JournalWriter, work: Work, kinds: Counter[str]
    ) -> None:
        """One finished rollout: to the journal first, then to the counts and the plan."""
        rec = journal_record(rec)  # secrets masked; a field that does not fit: a failure
        if rec["status"] != OK:
            kinds[rec["status"]] += 1
            self.failed_here.add((rec["task_index"], rec["rollout_index"]))
        self.counts[rec["status"]] += 1
        writer.append(rec)  # journaled before the plan hears of it
        work.returned(pos, rec["rollout_index"], rec["status"], rec.get("reward"))

    async def _episode_records(
        self, unit: Unit, env: ActingEnvironment, client: ChatClient, ctx: VerifyContext
    ) -> list[dict[str, Any]]:
        """An episode per rollout of the unit, side by side (stages/rollout/episodes.py)."""
        task_id, label = self._task_id[unit.pos], self._label[unit.pos]
        messages, row_json = self._text[unit.pos]
        row, prompt = json.loads(row_json), json.loads(messages)
        seed0 = task_seed(self.cfg.sampling.seed, task_id)
        choice, limits = env.tool_choice(row), env.limits()
        started = time.time()
        runs = (  # a chat function per episode: its turns share a replica
            episode_fields(
                env, row, prompt, seed0 + r, engine_chat(client, self._body, choice), ctx, limits
            )
            for r in unit.indices
        )
        done = await asyncio.gather(*runs)
        base = {
            "task_index": int(self._task_index[unit.pos]),
            "task_id": task_id,
            "label": label,
            "attempt": 1,
            "request_n": 1,
            "gen_key": self.gen_key,
            "model": self.endpoint.model,
            "engine": self.endpoint.identity,
            "started_at": started,
            "latency_s": time.time() - started,
            "writer": self.writer_id,
        }
        return [
            dict(base, rollout_index=r, seed=seed0 + r, **fields)
            for r, fields in zip(unit.indices, done, strict=True)
        ]

    def load_text(self, positions: list[int]) -> None:
        """messages + row JSON of the tasks at these positions (only those are read)."""
        need = [p for p in positions if p not in self._text]
        if not need:
            return
        if "messages" in self.tasks.columns and "row" in self.tasks.columns:
            msgs, rows = self.tasks["messages"], self.tasks["row"]
            self._text.update((p, (msgs.iat[p], rows.iat[p])) for p in need)
            return
        if self.tasks_path is None:
            raise ValueError("tasks without messages/row columns need tasks_path")
        self._text.update(read_text(self.tasks_path, need))

    def _text_batches(self, positions: list[int]) -> list[list[int]]:
        """`positions` split by the tasks file's row groups (one read each), in order."""
        if self.tasks_path is None or "messages" in self.tasks.columns:
            return [positions]
        meta = pq.ParquetFile(self.tasks_path).metadata
        ends = np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        group = np.searchsorted(ends, np.asarray(positions, dtype=np.int64), side="right")
        cuts = np.flatnonzero(np.diff(group)) + 1
        return [part.tolist() for part in np.split(np.asarray(positions, dtype=np.int64), cuts)]

    async def generate(self, endpoint: Endpoint, work: Work, progress: Progress) -> None:
        """Sample what `work` asks for from `endpoint` until it is finished: its requests go
        to a fixed pool of workers through a bounded queue; each result goes to the journal,
        then to `work`, which may ask for more (adaptive rounds) while others are still out."""
        self.endpoint, r = endpoint, self.cfg.rollout
        # text is read one row group at a time as the queue reaches it: the first request of a
        # resumed shard does not wait for the text of every task still missing rollouts
        batches = iter(self._text_batches(work.positions()))
        queue: asyncio.Queue[Unit | None] = asyncio.Queue(maxsize=2 * r.concurrency)
        returned = asyncio.Event()  # a request finished: `work` may ask for more
        writer = JournalWriter(
            self.journal_dir, self.writer_id, r.segment_interval_s, r.segment_max_records
        )
        pool = make_pool(r.verify_workers)
        self._warm_pool(pool, r.verify_workers)
        liveness = EndpointLiveness(r.endpoint_down_s)
        balancer = make_balancer(self.cfg, self.endpoint)
        # several replicas: their caps bound the connections (the worker pool follows them)
        limit = r.concurrency if balancer is None else 0
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)
        if balancer is not None:
            progress.replicas = balancer.snapshot
        ticking = asyncio.ensure_future(progress.ticking())
        probing = None
        try:
            async with client_session(connector) as session:
                client = ChatClient(
                    session,
                    self.endpoint.base_url,
                    self.endpoint.api_key,
                    r,
                    liveness=liveness,
                    balancer=balancer,
                )
                if balancer is not None:
                    # the jobs on the fleet and the replicas' queues known before the first
                    # request: a share taken before that is taken blind (engine/sharing.py)
                    await balancer.start(session)
                    probing = asyncio.ensure_future(balancer.watch(session))
                ctx = VerifyContext(pool=pool, timeout_s=r.verify_timeout_s, http_session=None)

                async def worker() -> None:
                    while (unit := await queue.get()) is not None:
                        await self._do_unit(unit, client, ctx, writer, progress, work)
                        returned.set()

                def staff() -> None:  # a worker per sequence the replicas admit, at least
                    want = max(r.concurrency, balancer.admission() if balancer else 0)
                    workers.extend(
                        asyncio.create_task(worker()) for _ in range(want - len(workers))
                    )

                async def feed() -> None:
                    taken = 0
                    while True:
                        units = work.take()
                        count = sum(len(u.indices) for u in units)
                        if taken:  # the first take is the total `progress` started with
                            progress.add(count)
                        taken += count
                        for unit in units:
                            staff()
                            await self._read_text_for(unit.pos, batches)
                            await queue.put(unit)
                        if work.finished:
                            break
                        if not units:
                            await returned.wait()  # set by a worker since the last take
                            returned.clear()
                    for _ in workers:
                        await queue.put(None)
                    await asyncio.gather(*workers)

                workers = [asyncio.create_task(worker()) for _ in range(r.concurrency)]
                try:
                    await run_while_alive(
                        feed(),
                        liveness,
                        f"{self.shard_tag}: engine {self.endpoint.identity}",
                    )
                finally:
                    stopping = [*workers, *([probing] if probing is not None else [])]
                    for task in stopping:
                        task.cancel()
                    # awaited before the session closes: a probe cut short is not a dead replica
                    await asyncio.gather(*stopping, return_exceptions=True)
        finally:
            ticking.cancel()
            writer.close()  # whatever finished is kept, also on SIGTERM or an error
            for env in self.envs.values():
                await env.aclose()
            pool.stop()
            pool.join(timeout=10)

    async def _read_text_for(self, pos: int, batches) -> None:
        """The text of the task at `pos`, read with its row group's batch when it is due."""
        while pos not in self._text:
            batch = next(batches, None)
            await asyncio.to_thread(self.load_text, [pos] if batch is None else batch)

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
