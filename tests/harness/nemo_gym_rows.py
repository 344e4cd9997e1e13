"""NeMo Gym's recorded example rows (tests/data/nemo_gym/<env>/), shared by the in-process
conformance tests (L0) and the replay of their recorded rewards (L1)."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "nemo_gym"
ENVS = ["instruction_following", "ifbench", "mcqa", "math_with_judge", "polymath"]
# One recorded closed form takes math-verify ~10 s (6 s CPU) alone; past its own time limit it
# answers "not equal" (a 0, not a timeout), so the limit leaves room for a loaded machine.
OPTIONS = {env: {"timeout_s": 120} for env in ("math_with_judge", "polymath")}


def rows(env: str, name: str) -> list[dict]:
    """The JSON rows of one of env's files (example.jsonl, example_rollouts.jsonl)."""
    with (DATA / env / name).open() as f:
        return [json.loads(line) for line in f if line.strip()]


def task_row(record: dict) -> dict:
    """The row as a task: everything but NeMo Gym's recorded response."""
    return {k: v for k, v in record.items() if k != "response"}
