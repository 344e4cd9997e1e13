"""The prior file's format, adaptive/prior.json (RunLayout.adaptive_prior): what the prior job
(stages/adaptive/prior.py) fitted on every shard's first round and every later round reads.

It holds each label's stopping prior (`label_priors`, decisions' LabelPrior as a dict) beside
its profile-family prior (`labels`), and with adaptive.warm_start the warm start's record
(`warm_start`, its `task_keys`: task_id -> prior key). This module reads and writes the JSON;
the priors as objects are decisions' (stages/adaptive_settings.py builds them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardprof.core.atomic import write_json_atomic


@dataclass(frozen=True)
class PriorFile:
    """A prior file as read."""

    mixtures: dict[str, dict[str, Any]]  # label -> its profile-family prior
    label_priors: dict[str, dict[str, Any]]  # label or warm key -> its LabelPrior
    task_keys: dict[str, str] | None  # adaptive.warm_start: task_id -> its prior's key


def read_prior_file(path: Path) -> PriorFile:
    data = json.loads(Path(path).read_text())
    keys = (data.get("warm_start") or {}).get("task_keys")
    return PriorFile(data["labels"], data["label_priors"], keys)


def write_prior_file(path: Path, body: dict[str, Any]) -> None:
    """The prior job's result (min_rollouts, gen_key, labels, streaks, label_priors and, with
    a warm start, warm_start), written whole or not at all."""
    write_json_atomic(path, body)
