"""shard: shard i of N owns the tasks with task_index % N == i (every shard gets every mix).

The rollout store is keyed by (task_id, task_index, rollout_index), not by shard, so a new N
re-partitions the tasks without moving or regenerating any collected rollout.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path
from rewardprof.core.schemas import TASKS_SCHEMA


def shard_mask(task_index, shard_index: int, num_shards: int):
    """Boolean mask of task_index % num_shards == shard_index (integer division in Arrow)."""
    quotient = pc.divide(task_index, num_shards)
    remainder = pc.subtract(task_index, pc.multiply(quotient, num_shards))
    return pc.equal(remainder, shard_index)


def write_shard(
    tasks_path: str | Path, out_path: str | Path, shard_index: int, num_shards: int
) -> int:
    """Write shard `shard_index` of `num_shards`; return its number of tasks."""
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard index {shard_index} is not in [0, {num_shards})")
    n = 0
    pf = pq.ParquetFile(tasks_path)
    with (
        atomic_path(out_path) as tmp,
        pq.ParquetWriter(tmp, TASKS_SCHEMA, compression="zstd") as writer,
    ):
        for batch in pf.iter_batches(batch_size=8192):
            part = batch.filter(shard_mask(batch.column("task_index"), shard_index, num_shards))
            if part.num_rows:
                writer.write_batch(part)
                n += part.num_rows
    return n
