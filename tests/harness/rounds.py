"""The round-synchronous adaptive loop, as the rollout stage ran it before rounds were planned
task by task: plan every task, sample everything the plan is missing, wait for all of it,
plan again. The reference the no-barrier planner is tested against (unit and fault tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.config import Config
from rewardprof.decisions.audit.sample import audit_of
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Plan, Records, plan
from rewardprof.decisions.priors.warm_start import prior_keys_of
from rewardprof.stages.adaptive_settings import load_priors, settings_of


def round_synchronous(
    settings: AdaptiveSettings,
    ex,
    num_repeats: np.ndarray,
    labels: np.ndarray,
    rewards: np.ndarray,
    priors: dict | None = None,
    pass_threshold: float = 1.0,
    audit: np.ndarray | None = None,
    prior_keys: np.ndarray | None = None,
) -> tuple[set[tuple[int, int]], Plan]:
    """(the (task position, rollout index) pairs sampled, the final plan); `rewards[pos, r]`:
    rollout r of task pos's reward (NaN: it failed); the other arguments as `plan` takes
    them."""
    args = (settings, ex, num_repeats, labels)
    pos, idx = np.zeros(0, np.int64), np.zeros(0, np.int64)
    while True:
        records = Records(pos, idx, rewards[pos, idx])
        p = plan(*args, records, priors, pass_threshold, audit, prior_keys=prior_keys)
        new_pos, new_idx = p.missing(records)
        if not len(new_pos):
            return set(zip(pos.tolist(), idx.tolist(), strict=True)), p
        pos, idx = np.concatenate([pos, new_pos]), np.concatenate([idx, new_idx])


def shards_round_synchronous(
    cfg: Config, shards: list[Path], rewards: pd.DataFrame, prior: Path | None = None
) -> tuple[set[tuple[int, int]], pd.DataFrame]:
    """The round-synchronous planner on a run's shards (their tasks files), shard by shard:
    (the (task_index, rollout_index) pairs it samples, task_index, planned, stopped_early,
    keep per task as read_plans gives them). `rewards`: task_index, rollout_index, reward of
    every rollout up to K (a fixed-K run of the same tasks and seeds); bayes: the priors the
    run fitted (`prior`)."""
    reward = rewards.set_index(["task_index", "rollout_index"])["reward"]
    priors = load_priors(prior)
    pairs, plans = set(), []
    for path in shards:
        tasks = pq.read_table(path).to_pandas()
        k, labels = tasks["num_repeats"].to_numpy(), tasks["label"].to_numpy(dtype=object)
        index = tasks["task_index"].to_numpy()
        table = np.array([[reward[(t, r)] for r in range(int(k.max()))] for t in index])
        audit = audit_of(tasks["task_id"].to_numpy(dtype=object), labels, priors)
        keys = prior_keys_of(tasks["task_id"], labels, priors)
        threshold = cfg.profile.pass_threshold
        got, p = round_synchronous(
            settings_of(cfg), cfg.export, k, labels, table, priors, threshold, audit, keys
        )
        pairs |= {(int(index[t]), r) for t, r in got}
        columns = {"planned": p.planned, "stopped_early": p.stopped_early, "keep": p.keep}
        plans.append(pd.DataFrame({"task_index": index, **columns}))
    return pairs, pd.concat(plans).sort_values("task_index", ignore_index=True)


def same_plans(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Plans equal task by task (read_plans' columns)."""
    for col in ("task_index", "planned", "stopped_early", "keep"):
        assert got[col].tolist() == want[col].tolist(), col
