"""The rollout stage: client, journal, and the shard runner."""

from rewardprof.rollout.output import ShardIncomplete
from rewardprof.rollout.runner import run_shard

__all__ = ["ShardIncomplete", "run_shard"]
