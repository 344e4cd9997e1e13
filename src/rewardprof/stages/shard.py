"""shard: write the tasks shard i of N owns (the rule: store/shards.py)."""

from __future__ import annotations

import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path
from rewardprof.core.config import Config
from rewardprof.stages import StagePaths, StageReport
from rewardprof.store.schemas import TASKS_SCHEMA
from rewardprof.store.shards import shard_mask


def run(cfg: Config | None, paths: StagePaths) -> StageReport:
    """Write shard paths.shard of paths.num_shards of the tasks table (paths.tasks) to
    paths.out; report its number of tasks. Needs no config."""
    tasks_path, out_path = paths.need("tasks"), paths.need("out")
    shard_index, num_shards = paths.need("shard"), paths.need("num_shards")
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
    return {"shard": shard_index, "num_shards": num_shards, "num_tasks": n}
