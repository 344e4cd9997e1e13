"""An earlier run's profile read as a warm start's input (adaptive.warm_start): the columns it
must have, which stages/profile.py writes in profile/tasks.parquet."""

from __future__ import annotations

EARLIER_COLUMNS = ("task_id", "num_rollouts", "num_passed")
