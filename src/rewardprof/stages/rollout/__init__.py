"""The rollout stage: generate and verify the missing rollouts of one shard (runner), kept
durable in the journal (journal, collected) and written as the shard's output (output)."""

from __future__ import annotations

from rewardprof.core.config import Config, ConfigError
from rewardprof.engine.session import engine_session
from rewardprof.stages import StagePaths, StageReport


def run(cfg: Config, paths: StagePaths) -> StageReport:
    """Open the engine session (an endpoint, or a vLLM server logging to paths.engine_log),
    collect every missing rollout of shard paths.shard of paths.num_shards (its tasks:
    paths.tasks) into the journal (paths.journal), write the shard's output (paths.out) and
    return the shard's summary. Adaptive bayes: the labels' priors from paths.prior."""
    from rewardprof.stages.rollout.adaptive_rounds import load_priors  # lazy: as run_shard
    from rewardprof.stages.rollout.runner import run_shard  # lazy: merge imports only the journal

    tag = f"s{paths.need('shard')}of{paths.need('num_shards')}"
    tasks, journal, out = paths.need("tasks"), paths.need("journal"), paths.need("out")
    priors = load_priors(paths.prior)
    if cfg.adaptive.mode == "bayes" and priors is None:
        raise ConfigError("adaptive.mode bayes: the rollout needs the fitted priors (--prior)")
    with engine_session(cfg, paths.engine_log) as endpoint:
        return run_shard(cfg, endpoint, tasks, journal, out, tag, priors)
