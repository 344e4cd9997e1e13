"""The shard's declared output: every (task_index, rollout_index) of its tasks, from the journal.

Written once generation is done, atomically, and only when the shard is complete and its
terminal failures are within `rollout.max_failed_fraction`.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path
from rewardprof.core.config import Config
from rewardprof.core.errors import RewardprofError
from rewardprof.core.kinds import OK
from rewardprof.store.collected import Collected, resolve
from rewardprof.store.journal import JournalScan, read_rows, scan_journal
from rewardprof.store.schemas import ROLLOUT_SCHEMA

log = logging.getLogger("rewardprof.stages.rollout")


class ShardIncomplete(RewardprofError, RuntimeError):
    """Too many terminal failures (over max_failed_fraction): no output is written."""


def write_output(
    cfg: Config,
    tasks: pd.DataFrame,
    wanted: np.ndarray,
    journal_dir: Path,
    gen_key: str,
    shard_tag: str,
    out_path: Path,
    metadata: dict[bytes, bytes] | None = None,
) -> dict[str, Any]:
    """Resolve the journal for `tasks` (task_index, task_id), rollouts 0..wanted-1 of each
    (num_repeats; under adaptive sampling the planned ones), and write the winners' full
    records to `out_path`, with `metadata` in its schema; return the shard summary."""
    scan = scan_journal(journal_dir)
    # the resolver's num_repeats: how many rollouts of each task count
    col = resolve(scan, tasks[["task_index", "task_id"]].assign(num_repeats=wanted), gen_key)
    summary = _summary(col, int(np.sum(wanted)), shard_tag)
    _check_complete(summary, cfg.rollout.max_failed_fraction, out_path)
    sources = _write_winners(scan, col, out_path, metadata)
    # how completion_tokens were counted: "apportioned" ones depend on request batching
    summary["completion_tokens_source"] = dict(sorted(sources.items()))
    return summary


def _summary(col: Collected, expected: int, shard_tag: str) -> dict[str, Any]:
    """The shard's counts: expected, present, ok, failed (by status), re-keyed."""
    by_status = col.winners["status"].value_counts().to_dict()
    failed = sum(v for k, v in by_status.items() if k != OK)
    return {
        "shard": shard_tag,
        "expected": expected,
        "present": len(col.winners),
        "ok": int(by_status.get(OK, 0)),
        "failed": int(failed),
        "by_status": {k: int(v) for k, v in sorted(by_status.items())},
        "rekeyed": col.rekeyed,
    }


def _check_complete(summary: dict[str, Any], limit: float, out_path: Path) -> None:
    """Raise ShardIncomplete when a rollout is missing or the terminal failures are over
    `limit` (rollout.max_failed_fraction); warn when there are some within it."""
    shard_tag, expected, failed = summary["shard"], summary["expected"], summary["failed"]
    if summary["present"] != expected:
        raise ShardIncomplete(
            f"{shard_tag}: {expected - summary['present']} of {expected} "
            f"rollouts missing after generation"
        )
    kinds = ", ".join(f"{k}={v}" for k, v in summary["by_status"].items() if k != OK)
    if expected and failed / expected > limit:
        raise ShardIncomplete(
            f"{shard_tag}: {failed} of {expected} rollouts failed terminally ({kinds}), "
            f"over rollout.max_failed_fraction={limit:g}; rerun the shard to retry them"
        )
    if failed:
        log.warning(
            "%s: %d of %d rollouts failed terminally (%s), within "
            "rollout.max_failed_fraction=%g: the output is written and a plain rerun keeps it; "
            "to retry them add --forcerun rollout to the snakemake command (or delete %s)",
            shard_tag,
            failed,
            expected,
            kinds,
            limit,
            out_path,
        )


def _write_winners(
    scan: JournalScan, col: Collected, out_path: Path, metadata: dict[bytes, bytes] | None
) -> Counter[str]:
    """The winners' full records to `out_path`, atomically; how their tokens were counted."""
    picks: dict[int, list[int]] = {}
    new_index: dict[tuple[int, int], int] = {}
    for src, row, ti in zip(
        col.winners["_src"], col.winners["_row"], col.winners["task_index"], strict=True
    ):
        picks.setdefault(int(src), []).append(int(row))
        new_index[(int(src), int(row))] = int(ti)
    sources: Counter[str] = Counter()
    with (
        atomic_path(out_path) as tmp,
        pq.ParquetWriter(tmp, _schema(metadata), compression="zstd") as w,
    ):
        for src, table in zip(sorted(picks), read_rows(scan, picks), strict=True):
            if col.rekeyed:  # records that followed their task_id get its current index
                idx = [new_index[(src, r)] for r in picks[src]]
                table = table.set_column(0, "task_index", pa.array(idx, pa.int64()))
            for v in pc.value_counts(table.column("completion_tokens_source")).to_pylist():
                sources[v["values"] or "none"] += v["counts"]
            w.write_table(table)
    return sources


def remove_stale_tmp(journal: Path, shard_tag: str, out_path: Path) -> None:
    """A killed attempt of this shard may have left a half-written segment or output temp
    file (never read: their names start with '.'). Holding the shard lock, no live writer of
    this shard owns one, so they go."""
    stale = [
        *journal.glob(f".{shard_tag}_*.parquet.tmp"),  # its writers: store.shards.writer_prefix
        *out_path.parent.glob(f".{out_path.name}.tmp-*"),
    ]
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        log.info("%s: removed %d temp files left by a killed attempt", shard_tag, len(stale))


def _schema(metadata: dict[bytes, bytes] | None) -> pa.Schema:
    return ROLLOUT_SCHEMA.with_metadata(metadata) if metadata else ROLLOUT_SCHEMA
