"""The rollout stage: generate and verify the missing rollouts of one shard (runner), kept
durable in the journal (journal, collected) and written as the shard's output (output)."""

from __future__ import annotations

from rewardprof.core.config import Config
from rewardprof.engine.session import engine_session
from rewardprof.stages import StagePaths, StageReport


def run(cfg: Config, paths: StagePaths) -> StageReport:
    """Collect every missing rollout of shard paths.shard of paths.num_shards (its tasks:
    paths.tasks) into the journal (paths.journal), write the shard's output (paths.out) and
    return the shard's summary. The engine session (an endpoint, or a vLLM server logging to
    paths.engine_log) opens only after the journal was read, and only when something is
    missing: a shard with everything journaled finishes in seconds without an engine."""
    from rewardprof.stages.rollout.runner import run_shard  # lazy: merge imports only the journal

    tag = f"s{paths.need('shard')}of{paths.need('num_shards')}"
    tasks, journal, out = paths.need("tasks"), paths.need("journal"), paths.need("out")
    return run_shard(cfg, lambda: engine_session(cfg, paths.engine_log), tasks, journal, out, tag)
