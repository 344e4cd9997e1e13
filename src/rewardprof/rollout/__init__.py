"""The rollout stage: client, journal, and the shard runner."""

from rewardprof.rollout.runner import ShardIncomplete, run_shard

__all__ = ["ShardIncomplete", "run_shard"]
