"""A blend of single-turn entries (math, mcq) and an environment that acts (NeMo Gym's counter)
through the workflow (L3 local), 2 shards, a scripted engine that calls tools: Snakemake and its
jobs SIGKILLed while an episode waits for its second turn (held at the fake engine's gate, so
the kill lands mid-episode by construction), then unlocked and run again. Nothing is lost,
nothing is duplicated, and every rollout (status, reward, seed, trajectory) equals an
uninterrupted run's; `rewardprof check` counts the episodes and `rewardprof status` shows the
acting entry."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import psutil
import pytest
from harness import shardkit as kit
from harness.episode_replay import counter_policy
from harness.nemo_gym_rows import DATA
from helpers import (
    REPO,
    WITHOUT_EXPORT,
    endpoint_config,
    popen_snakemake,
    snakemake,
    wait_for,
    write_config,
)

from rewardprof.store.layout import RunLayout
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow


def _later_turn(body: dict) -> bool:
    return bool(body.get("tools")) and any(m["role"] == "tool" for m in body["messages"])


def _blend(work: Path, url: str) -> Path:
    kit.write_source(work / "data/m.jsonl", 4)
    shutil.copy(REPO / "data/examples/mcq.jsonl", work / "data/q.jsonl")
    shutil.copy(DATA / "example_session_state_mgmt/example.jsonl", work / "data/c.jsonl")
    entries = [
        {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2},
        {"label": "q", "environment": "mcq", "source": "data/q.jsonl", "num_repeats": 2},
        {
            "label": "counter",
            "environment": "example_session_state_mgmt",
            "source": "data/c.jsonl",
            "num_repeats": 3,
        },
    ]
    return write_config(work, endpoint_config(url, entries, num_shards=2))


def _rollouts(work: Path) -> pd.DataFrame:
    df = pd.read_parquet(work / "results/t/rollouts.parquet")
    return df.set_index(["task_index", "rollout_index"]).sort_index()


def _run(work: Path, config: Path):
    r = snakemake(work, *WITHOUT_EXPORT, "--configfile", str(config))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def test_a_sigkilled_blend_with_episodes_resumes_to_the_uninterrupted_run(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    with FakeOpenAI(kit.answer, tool_calls=counter_policy) as server:
        _run(whole, _blend(whole, server.base_url))
        config = _blend(cut, server.base_url)
        server.hold_after(3, match=_later_turn)  # 3 second turns served, then they wait
        controller = popen_snakemake(cut, *WITHOUT_EXPORT, "--configfile", str(config))
        wait_for(lambda: server.gate_held >= 1, "an episode to wait for its second turn")
        tree = [psutil.Process(controller.pid), *psutil.Process(controller.pid).children(True)]
        for proc in tree:
            proc.send_signal(signal.SIGKILL)
        controller.wait(timeout=60)
        psutil.wait_procs(tree, timeout=60)
        server.hold_after(None)
        unlock = snakemake(cut, "--unlock", "--configfile", str(config))
        assert unlock.returncode == 0, unlock.stderr[-2000:]
        _run(cut, config)
    want, got = _rollouts(whole), _rollouts(cut)
    assert not got.index.duplicated().any() and len(got) == len(want) == 4 * 2 + 8 * 2 + 5 * 3
    # every attempt's log kept: the killed attempt's lines above the rerun's (Snakemake deletes
    # a job's log before running it again; the log is a link into logs/<kind>/attempts/)
    layout = RunLayout(cut / "results" / "t")
    logs = [layout.shard_log("rollout", i, 2) for i in range(2)]
    attempts = [log.read_text().count("===== rollout attempt started") for log in logs]
    assert max(attempts) == 2 and min(attempts) >= 1, attempts
    for kind in ("rollout", "engine"):
        log = layout.shard_log(kind, 0, 2)
        assert log.is_symlink() and log.resolve() == log.parent / "attempts" / log.name
    columns = ["label", "status", "reward", "seed", "completion"]
    pd.testing.assert_frame_equal(got[columns], want[columns])
    for pair, extras in want.loc[want["label"] == "counter", "extras"].items():
        trajectory = json.loads(extras)["trajectory"]
        assert json.loads(got.loc[pair, "extras"])["trajectory"] == trajectory, pair
    rewardprof = str(Path(sys.executable).parent / "rewardprof")
    check = subprocess.run(
        [rewardprof, "check", "results/t"], cwd=cut, capture_output=True, text=True
    )
    assert check.returncode == 0 and "(15 episodes)" in check.stdout, check.stdout + check.stderr
    status = subprocess.run(
        [rewardprof, "status", "results/t"], cwd=cut, capture_output=True, text=True
    )
    # status knows the acting entry: its episodes done of those expected, and scored
    row = re.search(r"^counter +example_session_state_mgmt +15/15 +(\d+)$", status.stdout, re.M)
    assert status.returncode == 0 and row, status.stdout + status.stderr
    assert int(row.group(1)) == int(got.loc[got["label"] == "counter", "status"].eq("ok").sum())
