"""shard: write the tasks shard i of N owns (the rule: store/shards.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path
from rewardprof.stages import ShardPaths
from rewardprof.store.schemas import TASKS_SCHEMA
from rewardprof.store.shards import shard_mask

if TYPE_CHECKING:
    from rewardprof.core.config import Config


class ShardReport(TypedDict):
    shard: int
    num_shards: int
    num_tasks: int


def run(cfg: Config | None, paths: ShardPaths) -> ShardReport:
    """Write shard paths.shard of the tasks table (paths.tasks) to paths.out; report its
    number of tasks. Needs no config."""
    shard_index, num_shards = paths.shard
    n = 0
    pf = pq.ParquetFile(paths.tasks)
    with (
        atomic_path(paths.out) as tmp,
        pq.ParquetWriter(tmp, TASKS_SCHEMA, compression="zstd") as writer,
    ):
        for batch in pf.iter_batches(batch_size=8192):
            part = batch.filter(shard_mask(batch.column("task_index"), shard_index, num_shards))
            if part.num_rows:
                writer.write_batch(part)
                n += part.num_rows
    return {"shard": shard_index, "num_shards": num_shards, "num_tasks": n}
