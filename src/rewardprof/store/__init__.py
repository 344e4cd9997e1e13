"""The run's durable store: where each file of a run directory lives (layout), the tables'
schemas, the shard rule, the append-only rollout journal and which of its records count."""
