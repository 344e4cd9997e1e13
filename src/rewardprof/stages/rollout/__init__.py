"""The rollout stage: generate and verify the missing rollouts of one shard (runner), kept
durable in the journal and written as the shard's output."""
