"""rollout: generate and verify the missing rollouts of one shard, then write its output.

A fixed pool of `concurrency` workers pulls request units from a bounded queue (never one
coroutine per rollout), so memory stays flat however large the shard. Every finished rollout
goes to the journal before anything else happens to it; the declared output is written
atomically once every (task_index, rollout_index) is ok or failed for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rewardprof.core.config import MAX_NUM_REPEATS, Config
from rewardprof.core.schemas import OK, FailureKind, TokensSource
from rewardprof.engine.client import ChatClient, ChatResult
from rewardprof.engine.session import Endpoint
from rewardprof.environments import Environment, Verdict, VerifyContext, make_environment
from rewardprof.stages.rollout.collected import resolve
from rewardprof.stages.rollout.journal import JournalWriter, ShardLock, scan_journal
from rewardprof.stages.rollout.output import remove_stale_tmp, write_output
from rewardprof.stages.rollout.progress import Progress

log = logging.getLogger("rewardprof.stages.rollout")


_WRITER_SEQ = itertools.count()


@dataclass
class Unit:
    """One request: `indices` are consecutive rollout indices of one task."""

    pos: int  # row of the task in the shard table
    indices: list[int]


# How a rollout's seed derives from its task (task_seed below). Part of gen_key: records made
# under another scheme are stale (not reused, regenerated), so one shard never mixes schemes.
#   1: 15 bits of sha256 << 16 (before issue #14: 2^15 distinct bases, shared at scale)
#   2: 51 bits of sha256 << 12, rollout index in the low 12 bits (docs/robustness.md)
SEED_SCHEME = 2
ROLLOUT_BITS = 12  # K <= 2^12 (config: MAX_NUM_REPEATS)
assert MAX_NUM_REPEATS <= 1 << ROLLOUT_BITS
_BASE_MASK = ((1 << 63) - 1) & ~((1 << ROLLOUT_BITS) - 1)


def _gen_spec(cfg: Config, model: str) -> dict[str, Any]:
    s = cfg.sampling
    return {
        "model": model,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "seed": s.seed,
        "extra_body": cfg.engine.extra_body,
    }


def _fingerprint(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def gen_key(cfg: Config, model: str) -> str:
    """Fingerprint of what a rollout's text depends on; records of another key are not reused.
    return_token_ids (in extra_body or engine.return_token_ids) only adds token ids to the
    response, never changes the text: it is left out."""
    spec = _gen_spec(cfg, model)
    spec["extra_body"] = {k: v for k, v in spec["extra_body"].items() if k != "return_token_ids"}
    spec["seed_scheme"] = SEED_SCHEME
    return _fingerprint(spec)


def legacy_gen_key(cfg: Config, model: str) -> str:
    """The gen_key the same config had under seed scheme 1 (to name such records in the log)."""
    return _fingerprint(_gen_spec(cfg, model))


def task_seed(base_seed: int, task_id: str) -> int:
    """Rollout r of a task samples with seed task_seed + r (vLLM gives choice j seed + j).

    Bits 12..62 of the seed are the top 51 bits of sha256("<base_seed>:<task_id>"), the low 12
    bits are 0 and take r < 2^12: task_seed + r <= 2^63 - 1 (vLLM takes a signed 64-bit seed),
    and two tasks share seeds only when their 51-bit bases collide (docs/robustness.md)."""
    digest = hashlib.sha256(f"{base_seed}:{task_id}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") >> 1) & _BASE_MASK


def wants_token_ids(cfg: Config) -> bool:
    """Whether requests carry return_token_ids: true (engine.return_token_ids; null: serve
    mode only, where the engine is always vLLM)."""
    flag = cfg.engine.return_token_ids
    return cfg.engine.mode == "serve" if flag is None else flag


def _units(missing: list[list[int]], max_n: int) -> Iterator[Unit]:
    for pos, indices in enumerate(missing):
        run: list[int] = []
        for r in indices:
            if run and (r != run[-1] + 1 or len(run) >= max_n):
                yield Unit(pos, run)
                run = []
            run.append(r)
        if run:
            yield Unit(pos, run)


class ShardRun:
    def __init__(
        self,
        cfg: Config,
        endpoint: Endpoint,
        tasks: pd.DataFrame,
        journal_dir: Path,
        shard_tag: str,
        tasks_path: Path | None = None,
    ):
        """`tasks` needs task_index, task_id, label, environment, num_repeats, and either the
        messages and row columns or `tasks_path` to read them from, for the tasks that still
        need rollouts only (a resuming shard does not read the text of finished tasks)."""
        self.cfg, self.endpoint, self.tasks = cfg, endpoint, tasks
        self.tasks_path = tasks_path
        # plain lists for the hot path (DataFrame.iloc costs ~100 us per call)
        self._task_index = tasks["task_index"].tolist()
        self._task_id = tasks["task_id"].tolist()
        self._label = tasks["label"].tolist()
        self._text: dict[int, tuple[str, str]] = {}
        self.journal_dir, self.shard_tag = journal_dir, shard_tag
        self.gen_key = gen_key(cfg, endpoint.model)
        self._token_ids = wants_token_ids(cfg)
        # unique per writer, also for two runs of one shard in one process within a second
        self.writer_id = (
            f"{shard_tag}-{int(time.time())}-{socket.gethostname()}-"
            f"{os.getpid()}-{next(_WRITER_SEQ)}"
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

    def missing(self) -> tuple[list[list[int]], dict[str, int]]:
        scan = scan_journal(self.journal_dir)
        col = resolve(scan, self.tasks[["task_index", "task_id", "num_repeats"]], self.gen_key)
        ok = col.winners[col.winners["status"] == OK]
        missing = _missing_indices(self.tasks, ok)
        info = {
            "journaled_ok": len(ok),
            "stale": col.stale,
            "rekeyed": col.rekeyed,
            "torn_lines": scan.torn_lines,
            "stale_seed_scheme_1": col.stale_keys.get(
                legacy_gen_key(self.cfg, self.endpoint.model), 0
            ),
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
    ) -> None:
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
        failed = tokens = 0
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
                verdict = await _verify(env, row, choice.text, ctx)
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
            failed += rec["status"] != OK
            self.counts[rec["status"]] += 1
            writer.append(rec)
        progress.update(len(unit.indices), failed, tokens)

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
        self._text.update(_read_text(self.tasks_path, need))

    def _text_batches(self, positions: list[int]) -> list[list[int]]:
        """`positions` split by the tasks file's row groups (one read each), in order."""
        if self.tasks_path is None or "messages" in self.tasks.columns:
            return [positions]
        meta = pq.ParquetFile(self.tasks_path).metadata
        ends = np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        group = np.searchsorted(ends, np.asarray(positions, dtype=np.int64), side="right")
        cuts = np.flatnonzero(np.diff(group)) + 1
        return [part.tolist() for part in np.split(np.asarray(positions, dtype=np.int64), cuts)]

    async def generate(self, missing: list[list[int]], progress: Progress) -> None:
        r = self.cfg.rollout
        # text is read one row group at a time as the queue reaches it: the first request of a
        # resumed shard does not wait for the text of every task still missing rollouts
        batches = iter(self._text_batches([pos for pos, m in enumerate(missing) if m]))
        queue: asyncio.Queue[Unit | None] = asyncio.Queue(maxsize=2 * r.concurrency)
        writer = JournalWriter(
            self.journal_dir, self.writer_id, r.segment_interval_s, r.segment_max_records
        )
        pool = _make_pool(r.verify_workers)
        self._warm_pool(pool, r.verify_workers)
        connector = aiohttp.TCPConnector(limit=r.concurrency, limit_per_host=r.concurrency)
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                client = ChatClient(session, self.endpoint.base_url, self.endpoint.api_key, r)
                ctx = VerifyContext(pool=pool, timeout_s=r.verify_timeout_s, http_session=None)

                async def worker() -> None:
                    while (unit := await queue.get()) is not None:
                        await self._do_unit(unit, client, ctx, writer, progress)

                workers = [asyncio.create_task(worker()) for _ in range(r.concurrency)]
                try:
                    for unit in _units(missing, self.cfg.engine.max_n):
                        while unit.pos not in self._text:
                            await asyncio.to_thread(self.load_text, next(batches))
                        await queue.put(unit)
                    for _ in workers:
                        await queue.put(None)
                    await asyncio.gather(*workers)
                finally:
                    for w in workers:
                        w.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
        finally:
            writer.close()  # whatever finished is kept, also on SIGTERM or an error
            for env in self.envs.values():
                await env.aclose()
            pool.stop()
            pool.join(timeout=10)

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
                pool.schedule(_warm_worker, args=(name, options))


def _warm_worker(name: str, options_json: str) -> None:
    # warming is an optimisation: verification itself reports any real problem
    with contextlib.suppress(Exception):
        make_environment(name, json.loads(options_json)).warm()


def _make_pool(workers: int):
    from pebble import ProcessPool

    return ProcessPool(max_workers=workers)


async def _verify(env: Environment, row: dict, text: str, ctx: VerifyContext) -> Verdict:
    try:
        verdict = await env.verify(row, text, ctx)
    except Exception as exc:  # a verifier bug is this rollout's failure, not the shard's
        return Verdict.failure(FailureKind.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}"[:300])
    if verdict.status == OK and (verdict.reward is None or verdict.reward != verdict.reward):
        # "ok" without a reward would count as neither scored nor failed (issue #14)
        return Verdict.failure(
            FailureKind.VERIFIER_ERROR,
            f"environment {env.name!r} returned status ok with reward {verdict.reward}",
            **verdict.extras,
        )
    return verdict


def _load_tasks(path: Path) -> pd.DataFrame:
    """The shard's tasks without their text (messages, row): see ShardRun.load_text."""
    cols = ["task_index", "task_id", "label", "environment", "num_repeats"]
    return pq.read_table(path, columns=cols).to_pandas()


def _read_text(path: Path, positions: list[int]) -> dict[int, tuple[str, str]]:
    """messages + row of the tasks at `positions` (row numbers in the file), reading only the
    row groups that hold them."""
    pf = pq.ParquetFile(path)
    wanted = np.unique(np.asarray(positions, dtype=np.int64))
    starts = np.cumsum([0] + [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)])
    out: dict[int, tuple[str, str]] = {}
    groups = np.unique(np.searchsorted(starts, wanted, side="right") - 1)
    for g in groups.tolist():
        lo, hi = int(starts[g]), int(starts[g + 1])
        local = wanted[(wanted >= lo) & (wanted < hi)]
        part = pf.read_row_group(g, columns=["messages", "row"]).take(pa.array(local - lo))
        msgs, rows = part.column("messages").to_pylist(), part.column("row").to_pylist()
        out.update(zip(local.tolist(), zip(msgs, rows, strict=True), strict=True))
    return out


def _missing_indices(tasks: pd.DataFrame, ok: pd.DataFrame) -> list[list[int]]:
    """Per task (in table order), the rollout indices < num_repeats without an ok record."""
    repeats = tasks["num_repeats"].to_numpy(np.int64)
    if not len(repeats):
        return []
    width = int(repeats.max())
    pos = pd.Index(tasks["task_index"]).get_indexer(ok["task_index"])
    have = np.zeros((len(repeats), width + 1), dtype=bool)
    ri = ok["rollout_index"].to_numpy(np.int64)
    sel = (pos >= 0) & (ri < width)
    have[pos[sel], ri[sel]] = True
    need = (np.arange(width + 1) < repeats[:, None]) & ~have
    counts = need.sum(axis=1)
    missing: list[list[int]] = [[] for _ in range(len(repeats))]
    full = {k: list(range(k)) for k in np.unique(repeats).tolist()}
    for p in np.flatnonzero(counts).tolist():
        k = int(repeats[p])
        missing[p] = list(full[k]) if counts[p] == k else np.flatnonzero(need[p]).tolist()
    return missing


def run_shard(
    cfg: Config,
    endpoint: Endpoint,
    shard_tasks: str | Path,
    journal_dir: str | Path,
    out_path: str | Path,
    shard_tag: str,
) -> dict[str, Any]:
    """Collect every missing rollout of the shard's tasks, then write the shard output."""
    journal = Path(journal_dir)
    with ShardLock(journal, shard_tag):
        remove_stale_tmp(journal, shard_tag, Path(out_path))
        run = ShardRun(
            cfg,
            endpoint,
            _load_tasks(Path(shard_tasks)),
            journal,
            shard_tag,
            tasks_path=Path(shard_tasks),
        )
        missing, info = run.missing()
        todo = sum(len(m) for m in missing)
        log.info(
            "%s: %d tasks, %d rollouts already journaled, %d to generate "
            "(stale records ignored: %d, re-keyed: %d, torn lines skipped: %d)",
            shard_tag,
            len(run.tasks),
            info["journaled_ok"],
            todo,
            info["stale"],
            info["rekeyed"],
            info["torn_lines"],
        )
        if info["stale_seed_scheme_1"]:
            log.warning(
                "%s: %d of the stale records were made under seed scheme 1 (before "
                "issue #14; seed scheme now %d): they are not reused, their rollouts "
                "are generated again with the new seeds (docs/robustness.md)",
                shard_tag,
                info["stale_seed_scheme_1"],
                SEED_SCHEME,
            )
        if todo:
            progress = Progress(todo, shard_tag, cfg.rollout.progress_interval_s)
            try:
                asyncio.run(_with_sigterm(run.generate(missing, progress)))
            finally:
                progress.close()
        summary = write_output(run.cfg, run.tasks, journal, run.gen_key, shard_tag, Path(out_path))
        summary.update(generated=todo, **info)
        log.info("%s: done: %s", shard_tag, json.dumps(summary["by_status"]))
        sources = summary["completion_tokens_source"]
        if sources.get(TokensSource.APPORTIONED):
            log.warning(
                "%s: %d of %d rollouts have completion_tokens apportioned by text "
                "length (the server sent no token_ids): an estimate that depends on "
                "engine.max_n; set engine.return_token_ids: true if the endpoint is "
                "vLLM",
                shard_tag,
                sources[TokensSource.APPORTIONED],
                summary["present"],
            )
        return summary


async def _with_sigterm(coro) -> None:
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
