"""The rollout stage: generate and verify the missing rollouts of one shard (runner), kept
durable in the journal (journal, collected) and written as the shard's output (output), with a
heartbeat for `rewardprof status` (heartbeat, progress)."""

from __future__ import annotations

import functools
from typing import TypedDict

from rewardprof.core.config import Config, ConfigError
from rewardprof.engine.session import engine_session
from rewardprof.stages import RolloutPaths
from rewardprof.stages.rollout.heartbeat import ShardHeartbeat, beating
from rewardprof.stages.rollout.progress import peak_rss_mb


class RolloutReport(TypedDict):
    """The shard's summary (stages/rollout/output.py's, with what this job did)."""

    shard: str
    expected: int
    present: int
    ok: int
    failed: int
    by_status: dict[str, int]
    rekeyed: int
    completion_tokens_source: dict[str, int]
    generated: int
    journaled_ok: int
    stale: int
    torn_lines: int


def run(cfg: Config, paths: RolloutPaths) -> RolloutReport:
    """Collect every missing rollout of shard paths.shard (its tasks: paths.tasks) into the
    journal (paths.journal), write the shard's output (paths.out) and return the shard's
    summary. The engine session (an endpoint, or a vLLM server logging to paths.engine_log)
    opens only after the journal was read, and only when something is missing: a shard with
    everything journaled finishes in seconds without an engine. Adaptive bayes: the labels'
    priors from paths.prior. The heartbeat goes to paths.run_dir's status file, if given."""
    from rewardprof.stages.adaptive_settings import load_priors  # lazy: as run_shard
    from rewardprof.stages.rollout.shard_job import (  # lazy: merge imports only the journal
        EngineOpener,
        ShardJob,
        run_shard,
    )

    priors = load_priors(paths.prior)
    if cfg.adaptive.mode == "bayes" and priors is None:
        raise ConfigError("adaptive.mode bayes: the rollout needs the fitted priors (--prior)")
    interval = cfg.rollout.progress_interval_s
    beat = ShardHeartbeat.for_shard(paths.run_dir, paths.shard, interval)
    with beating(beat):
        # the engine is opened only if the journal lacks some rollout (run_shard)
        engine = EngineOpener(
            cfg.model_name, functools.partial(engine_session, cfg, paths.engine_log)
        )
        job = ShardJob(cfg, paths.tasks, paths.journal, paths.out, paths.shard.tag)
        summary = run_shard(job, engine, priors, heartbeat=beat)
    if beat is not None:
        beat.write(state="done", by_status=summary["by_status"], peak_rss_mb=peak_rss_mb())
    return summary
