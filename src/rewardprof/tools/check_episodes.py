"""check's episode invariants: every scored episode of a label that acts is journaled whole.

For each ok record of such a label: `extras.episode` holds the summary (steps >= 1, a known
stop reason, tool_calls >= tool_errors >= 0, the prompt's message count) and
`extras.trajectory` agrees with it: after the prompt, one assistant message per model turn and
one tool message per call, each answering a call id an earlier assistant message made. A
record that disagrees was half-written or mixed by hand, and the profile's episode columns
would be wrong. Reads only those labels' `status` and `extras`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rewardprof.environments import get_environment_class
from rewardprof.environments.episode import STOP_REASONS


def acting_labels(report: dict[str, Any]) -> list[str]:
    """The materialize report's labels whose environment runs episodes (unknown plug-ins:
    not checked here; the run would not have started without them)."""
    labels = []
    for e in report["entries"]:
        try:
            if getattr(get_environment_class(e["environment"]), "acts", False):
                labels.append(e["label"])
        except (KeyError, ValueError, ImportError):
            continue
    return labels


def episode_problem(extras: dict[str, Any]) -> str | None:
    """Why one ok record's episode is not whole, or None."""
    episode, trajectory = extras.get("episode"), extras.get("trajectory")
    if not isinstance(episode, dict) or not isinstance(trajectory, list):
        return "no episode summary or trajectory"
    keys = ("steps", "tool_calls", "tool_errors", "prompt_messages")
    steps, calls, errors, prompt = (episode.get(k) for k in keys)
    if not all(isinstance(v, int) for v in (steps, calls, errors, prompt)):
        return f"episode {'/'.join(keys)} are not integers"
    if steps < 1 or not 0 <= errors <= calls or not 0 <= prompt <= len(trajectory):
        return f"episode counts impossible (steps {steps}, calls {calls}, errors {errors})"
    if episode.get("stop_reason") not in STOP_REASONS:
        return f"unknown stop reason {episode.get('stop_reason')!r}"
    asked: set[str] = set()
    turns = answers = 0
    for m in trajectory[:prompt]:  # calls an earlier exchange of the prompt made
        if isinstance(m, dict) and m.get("role") == "assistant":
            asked.update(c.get("id") for c in m.get("tool_calls") or [])
    for m in trajectory[prompt:]:
        role = m.get("role") if isinstance(m, dict) else None
        if role == "assistant":
            turns += 1
            asked.update(c.get("id") for c in m.get("tool_calls") or [])
        elif role == "tool":
            answers += 1
            if m.get("tool_call_id") not in asked:
                return f"a tool message answers no call ({m.get('tool_call_id')!r})"
    if (turns, answers) != (steps, calls):
        return (
            f"trajectory has {turns} model turns and {answers} tool outputs, "
            f"the summary {steps} and {calls}"
        )
    return None


def check_episodes(path: Path, report: dict[str, Any], problems: list[str]) -> int:
    """Add the episode problems of the rollouts file `path`; return how many episodes it holds
    (scored or failed) of the labels that act."""
    labels = acting_labels(report)
    if not labels or not path.exists():
        return 0
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]  # merged: a dataset
    episodes, bad, first = 0, 0, None
    batches = (
        batch
        for f in files
        for batch in pq.ParquetFile(f).iter_batches(
            columns=["task_index", "rollout_index", "label", "status", "extras"], batch_size=1024
        )
    )
    for batch in batches:
        rows = batch.to_pydict()
        for i, label in enumerate(rows["label"]):
            if label not in labels:
                continue
            episodes += 1
            if rows["status"][i] != "ok":
                continue  # a failed episode (tool_error, ...) is recorded by its kind
            try:
                extras = json.loads(rows["extras"][i] or "{}")
            except ValueError:
                extras = {}
            why = episode_problem(extras if isinstance(extras, dict) else {})
            if why is not None:
                bad += 1
                if first is None:
                    first = (rows["task_index"][i], rows["rollout_index"][i], why)
    if first is not None:
        problems.append(
            f"{path}: {bad} episode(s) not whole (first: task_index {first[0]}, "
            f"rollout_index {first[1]}: {first[2]})"
        )
    return episodes
