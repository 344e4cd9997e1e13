"""Rollout jobs as `rewardprof rollout` runs them (the command a rule runs), started by hand
against a fake engine on a run directory built in process: what the live status and progress
tests drive. Nothing here waits on luck: `wait_for` polls a condition the test makes true."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from harness import shardkit as kit
from rewardprof.stages import MaterializePaths, ShardPaths, materialize, shard
from rewardprof.store.layout import RunLayout
from rewardprof.store.shards import ShardPosition


def run_dir(
    tmp_path: Path, base_url: str, tasks: int, k: int, n: int, **rollout
) -> tuple[RunLayout, Path]:
    """results/t/ with its tasks and `n` shard files (one math label of `tasks` tasks, K=`k`),
    and the config file of the run."""
    data = {
        "run": "t",
        "num_shards": n,
        "entries": [
            {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": k}
        ],
        "engine": {
            "mode": "endpoint",
            "base_url": base_url,
            "model": kit.MODEL,
            "return_token_ids": True,
        },
        "rollout": {
            "concurrency": 2,
            "backoff_initial_s": 0.05,
            "backoff_max_s": 0.2,
            "verify_workers": 1,
            "progress_interval_s": 0.2,
            **rollout,
        },
    }
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data))
    cfg = kit.make_config(base_url, k)  # only for materialize: same entry, same source
    layout = RunLayout(tmp_path / "results" / "t", n)
    kit.write_source(tmp_path / "data" / "m.jsonl", tasks)
    materialize.run(
        cfg,
        MaterializePaths(tasks=layout.tasks, report=layout.materialize_report, base_dir=tmp_path),
    )
    for i in range(n):
        shard.run(
            None,
            ShardPaths.from_layout(layout, ShardPosition(i, n)),
        )
    return layout, config


def rollout_job(layout: RunLayout, config: Path, i: int, log: Path) -> subprocess.Popen:
    """Shard `i`'s rollout job, its log in `log` and its stdout (the run's line) piped."""
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rewardprof.cli",
            "rollout",
            "--config",
            str(config),
            "--tasks",
            str(layout.shard_tasks(i)),
            "--journal",
            str(layout.journal),
            "--out",
            str(layout.shard_rollouts(i)),
            "--shard",
            str(i),
            "--num-shards",
            str(layout.num_shards),
            "--run-dir",  # its heartbeat and the run's line, as the rule passes it
            str(layout.root),
        ],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def wait_for(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def beat(layout: RunLayout, i: int) -> dict:
    """Shard `i`'s heartbeat as last written ({} before the first)."""
    try:
        return json.loads(layout.shard_status(i).read_text())
    except (OSError, ValueError):
        return {}


def status_cli(layout: RunLayout, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "rewardprof.cli", "status", str(layout.root), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout
