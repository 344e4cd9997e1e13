"""A pilot's rollout jobs, their attempts, and the startup overhead per job.

A rollout job writes its journal under writer ids `<i>-of-<n>_<time>-<host>-<pid>-<seq>`
(stages/rollout/runner.py): one attempt of shard i = one writer id. Bayes' first round is a job
of its own (its writer ids end in `-first`, timed by benchmarks/first_round/): not an attempt of
the rollout job. A shard with more than one attempt was interrupted and resumed (killed,
preempted, rerun): the benchmark
file (benchmarks/rollout/<i>-of-<n>.tsv) times only its last attempt, which resumed a partly
done shard, often on a warm page cache, so its startup says little about a fresh job's.

Startup overhead per job: for every shard run in one attempt, the benchmark's seconds minus the
attempt's generation span (first request to last finished rollout, over its writers); the mean
over those shards. Interrupted shards are left out, with one warning; when every shard was
interrupted their last attempts are used, with a warning that the figure is likely low.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from rewardprof.store.shards import FIRST_ROUND, writer_prefix

_PASS_SUFFIX = re.compile(r"-r\d+$")  # later passes of one job, as earlier adaptive jobs wrote


def attempt_of(writer: str) -> str:
    """The attempt a writer id belongs to (its later adaptive passes share it)."""
    return _PASS_SUFFIX.sub("", str(writer))


def _rollout_job_writer(writer: str) -> bool:
    return not str(writer).endswith(f"-{FIRST_ROUND}")


def startup_overhead(
    benchmarks: list[tuple[str, tuple[int, int], float]], first: pd.Series, last: pd.Series
) -> dict:
    """{startup_overhead_s, jobs, attempts, interrupted_shards, warning} from the rollout
    benchmarks ((name, shard (i, n), seconds) per rollout job, in name order: the benchmark
    file's last row) and each writer's first request / last finish (indexed by writer id)."""
    writers = pd.DataFrame({"first": first, "last": last})
    writers = writers[[_rollout_job_writer(w) for w in writers.index]]
    writers["attempt"] = [attempt_of(w) for w in writers.index]
    spans = writers.groupby("attempt").agg(first=("first", "min"), last=("last", "max"))
    clean, resumed, interrupted = [], [], []
    attempts = 0
    for name, shard, seconds in benchmarks:
        mine = spans[[str(a).startswith(writer_prefix(*shard)) for a in spans.index]]
        if not len(mine):
            continue
        attempts += len(mine)
        final = mine.sort_values("first").iloc[-1]
        overhead = max(0.0, seconds - float(final["last"] - final["first"]))
        if len(mine) > 1:
            interrupted.append(name)
            resumed.append(overhead)
        else:
            clean.append(overhead)
    warning = None
    if interrupted and clean:
        warning = (
            f"pilot: {len(interrupted)} of {len(interrupted) + len(clean)} rollout jobs were "
            f"interrupted and resumed ({', '.join(interrupted)}); startup overhead taken from "
            f"the {len(clean)} uninterrupted job(s) only"
        )
    elif interrupted:
        warning = (
            f"pilot: every rollout job was interrupted and resumed ({', '.join(interrupted)}); "
            "startup overhead taken from their last attempts, likely below a fresh job's: "
            "rerun the pilot uninterrupted for a reliable figure"
        )
    used = clean or resumed
    return {
        "startup_overhead_s": float(np.mean(used)) if used else None,
        "jobs": len(clean) + len(interrupted) if attempts else len(spans),
        "attempts": attempts or len(spans),
        "interrupted_shards": interrupted,
        "warning": warning,
    }
