"""Which tasks adaptive `bayes` fits its priors on: a hash-chosen sample of each label, so the
rest of the first round is work that needs no prior.

The priors are fitted once every shard's first round of the sample is journaled (one job
over all shards: the prior never depends on the shard layout). While the last of those
rollouts run, the engines would otherwise idle: the longest sequences of the round drain with
nothing else to send, then the prior job and the rounds' jobs start. A first-round job
therefore fills the slots its sample leaves free with the first round of its other tasks
(stages/rollout/shard_job.py), which needs no prior either, and the rounds' job takes up
whatever of it is missing. The sample is each label's `share` of tasks (at least
`min_tasks`, all of a label with at most that many), chosen by the smallest salted hashes of
task_id: deterministic, independent of the shard layout and of the audit's hash (another
salt). Half of a label's tasks fit a prior nearly as well as all of them (docs/benchmarks.md:
the shares of rollouts move by at most ~0.02 at 640 and 1,000 tasks), while a label at or
below `min_tasks` keeps every task in its fit.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rewardprof.decisions.audit import audit_unit

PRIOR_SHARE = 0.5
PRIOR_MIN_TASKS = 200


def sample_size(tasks: int, share: float = PRIOR_SHARE, min_tasks: int = PRIOR_MIN_TASKS) -> int:
    """How many of a label's `tasks` the prior is fitted on."""
    if tasks <= min_tasks:
        return tasks
    return min(tasks, max(min_tasks, math.ceil(share * tasks)))


def prior_sample(
    task_ids,
    labels,
    share: float = PRIOR_SHARE,
    min_tasks: int = PRIOR_MIN_TASKS,
    salt: str = "",
) -> np.ndarray:
    """Per task (every task of the run, in any order): in its label's prior sample."""
    task_ids = np.asarray(task_ids, dtype=object)
    labels = np.asarray(labels, dtype=object)
    unit = audit_unit(task_ids, "prior-sample:" + salt)
    out = np.zeros(len(task_ids), dtype=bool)
    for label in pd.unique(labels):
        rows = np.flatnonzero(labels == label)
        m = sample_size(len(rows), share, min_tasks)
        # ties (equal hashes) broken by task_id, so the order of the table never matters
        order = np.lexsort((task_ids[rows].astype(str), unit[rows]))
        out[rows[order[:m]]] = True
    return out


def sample_sizes(labels, sample: np.ndarray) -> dict[str, int]:
    """label -> the number of its tasks in the prior sample (recorded with the priors)."""
    labels = np.asarray(labels, dtype=object)
    return {str(lbl): int(sample[labels == lbl].sum()) for lbl in pd.unique(labels)}
