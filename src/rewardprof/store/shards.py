"""The shard rule and the shard's name, once: shard i of N owns the tasks with
task_index % N == i (every shard gets every environment's mix), and is called `<i>-of-<N>` in
file names, logs, heartbeats and journal writer ids.

The rollout store is keyed by (task_id, task_index, rollout_index), not by shard, so a new N
re-partitions the tasks without moving or regenerating any collected rollout."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

Indices = TypeVar("Indices")  # an int, a numpy array or a pandas Series of task indices

_SHARD_NAME = re.compile(r"^(\d+)-of-(\d+)\.([A-Za-z0-9]+)$")


def shard_of(task_index: Indices, num_shards: int) -> Indices:
    """The shard that owns each task index (elementwise for arrays and Series)."""
    return task_index % num_shards


def shard_mask(task_index: pa.Array, shard_index: int, num_shards: int) -> pa.Array:
    """Arrow's boolean mask of the tasks shard_index owns (shard_of in Arrow: integer division,
    as pyarrow has no modulo kernel)."""
    quotient = pc.divide(task_index, num_shards)
    remainder = pc.subtract(task_index, pc.multiply(quotient, num_shards))
    return pc.equal(remainder, shard_index)


def shard_tag(i: int | str, n: int | str) -> str:
    """`<i>-of-<n>`: how a shard is named everywhere (Snakemake wildcards pass through)."""
    return f"{i}-of-{n}"


@dataclass(frozen=True)
class ShardPosition:
    """Shard `index` of `count` (0 <= index < count), as datatrove's (rank, world_size)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is not in [0, {self.count})")

    @property
    def tag(self) -> str:
        """`<i>-of-<n>`: the shard's name in file names, logs, heartbeats, writer ids."""
        return shard_tag(self.index, self.count)

    def __iter__(self) -> Iterator[int]:
        """(index, count), as the shard methods of RunLayout take them: `layout.x(*shard)`."""
        return iter((self.index, self.count))


def shard_name(i: int | str, n: int | str, suffix: str = "parquet") -> str:
    return f"{shard_tag(i, n)}.{suffix}"


def parse_shard_name(name: str, suffix: str = "parquet") -> tuple[int, int] | None:
    """(i, n) of a file named `<i>-of-<n>.<suffix>`, else None."""
    m = _SHARD_NAME.match(name)
    if m is None or m.group(3) != suffix:
        return None
    return int(m.group(1)), int(m.group(2))


# the suffix of the writer ids of bayes' first-round job (`<i>-of-<n>_...-first`): its own job,
# not an attempt of the shard's rollout job
FIRST_ROUND = "first"


def writer_prefix(i: int, n: int) -> str:
    """The start of the journal writer ids of shard i's jobs: `<i>-of-<n>_...`."""
    return f"{shard_tag(i, n)}_"
