"""adaptive_first_round: adaptive bayes' first step in one shard, every task's first
`adaptive.min_rollouts` rollouts (at most K) into the journal, and a summary saying the
shard's first round is journaled (the prior is fitted on the first round of all shards)."""

from __future__ import annotations

import functools

from rewardprof.core.config import Config
from rewardprof.stages import StagePaths, StageReport
from rewardprof.stages.rollout.heartbeat import FIRST_ROUND_DONE, ShardHeartbeat, beating
from rewardprof.store.shards import shard_tag


def run(cfg: Config, paths: StagePaths) -> StageReport:
    """The first round of shard paths.shard of paths.num_shards (its tasks: paths.tasks) into
    the journal (paths.journal); the summary written to paths.out. The engine (an endpoint, or
    a vLLM server logging to paths.engine_log) opens only if some rollout is missing."""
    from rewardprof.engine.session import engine_session  # lazy: only rollout jobs need it
    from rewardprof.stages.rollout import shard_job  # lazy: as the rollout stage's run_shard

    engine = functools.partial(engine_session, cfg, paths.engine_log)
    tag = shard_tag(paths.need("shard"), paths.need("num_shards"))
    job = shard_job.ShardJob(
        cfg, paths.need("tasks"), paths.need("journal"), paths.need("out"), tag
    )
    # `rewardprof status` sees the first round as it sees the rounds: state, rate, ETA
    beat = ShardHeartbeat.for_first_round(job.out, cfg.rollout.progress_interval_s)
    with beating(beat):
        opener = shard_job.EngineOpener(cfg.model_name, engine)
        summary = shard_job.run_first_round(job, opener, heartbeat=beat)
    if beat is not None:
        beat.write(state=FIRST_ROUND_DONE)
    return summary
