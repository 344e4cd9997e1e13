"""The rollout stage: generate and verify the missing rollouts of one shard (runner), kept
durable in the journal (journal, collected) and written as the shard's output (output), with a
heartbeat for `rewardprof status` (heartbeat, progress)."""

from __future__ import annotations

import functools

from rewardprof.core.config import Config, ConfigError
from rewardprof.engine.session import engine_session
from rewardprof.stages import StagePaths, StageReport
from rewardprof.stages.rollout.heartbeat import ShardHeartbeat, beating
from rewardprof.stages.rollout.progress import peak_rss_mb
from rewardprof.store.shards import shard_tag


def run(cfg: Config, paths: StagePaths) -> StageReport:
    """Collect every missing rollout of shard paths.shard of paths.num_shards (its tasks:
    paths.tasks) into the journal (paths.journal), write the shard's output (paths.out) and
    return the shard's summary. The engine session (an endpoint, or a vLLM server logging to
    paths.engine_log) opens only after the journal was read, and only when something is
    missing: a shard with everything journaled finishes in seconds without an engine.
    Adaptive bayes: the labels' priors from paths.prior."""
    from rewardprof.stages.rollout.adaptive_rounds import load_priors  # lazy: as run_shard
    from rewardprof.stages.rollout.shard_job import (  # lazy: merge imports only the journal
        EngineOpener,
        ShardJob,
        run_shard,
    )

    tag = shard_tag(paths.need("shard"), paths.need("num_shards"))
    tasks, journal, out = paths.need("tasks"), paths.need("journal"), paths.need("out")
    priors = load_priors(paths.prior)
    if cfg.adaptive.mode == "bayes" and priors is None:
        raise ConfigError("adaptive.mode bayes: the rollout needs the fitted priors (--prior)")
    beat = ShardHeartbeat.for_output(out, cfg.rollout.progress_interval_s)
    with beating(beat):
        # the engine is opened only if the journal lacks some rollout (run_shard)
        engine = EngineOpener(
            cfg.model_name, functools.partial(engine_session, cfg, paths.engine_log)
        )
        job = ShardJob(cfg, tasks, journal, out, tag)
        summary = run_shard(job, engine, priors, heartbeat=beat)
    if beat is not None:
        beat.write(state="done", by_status=summary["by_status"], peak_rss_mb=peak_rss_mb())
    return summary
