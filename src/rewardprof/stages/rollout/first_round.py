"""adaptive bayes' first round in one shard: every task's first `adaptive.min_rollouts`
rollouts (at most K) into the journal, and a summary saying the shard's first round is
journaled (the prior is fitted on the first round of all shards: stages/adaptive/prior.py)."""

from __future__ import annotations

import functools
from typing import TypedDict

from rewardprof.core.config import Config
from rewardprof.stages import FirstRoundPaths
from rewardprof.stages.rollout.heartbeat import ShardHeartbeat, beating
from rewardprof.store.heartbeats import FIRST_ROUND_DONE, FIRST_ROUND_PHASE


class FirstRoundReport(TypedDict):
    shard: str
    tasks: int
    first_round: int
    generated: int
    present: int
    ok: int


def run(cfg: Config, paths: FirstRoundPaths) -> FirstRoundReport:
    """The first round of shard paths.shard (its tasks: paths.tasks) into the journal
    (paths.journal); the summary written to paths.out. The engine (an endpoint, or a vLLM
    server logging to paths.engine_log) opens only if some rollout is missing."""
    from rewardprof.engine.session import engine_session  # lazy: only rollout jobs need it
    from rewardprof.stages.rollout import shard_job  # lazy: as the rollout stage's run_shard

    engine = functools.partial(engine_session, cfg, paths.engine_log)
    job = shard_job.ShardJob(cfg, paths.tasks, paths.journal, paths.out, paths.shard.tag)
    # `rewardprof status` sees the first round as it sees the rounds: state, rate, ETA
    interval = cfg.rollout.progress_interval_s
    beat = ShardHeartbeat.for_shard(paths.run_dir, paths.shard, interval, FIRST_ROUND_PHASE)
    with beating(beat):
        opener = shard_job.EngineOpener(cfg.model_name, engine)
        summary = shard_job.run_first_round(job, opener, heartbeat=beat)
    if beat is not None:
        beat.write(state=FIRST_ROUND_DONE)
    return summary
