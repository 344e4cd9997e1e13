"""What docs/running.md says about a SIGKILL of Snakemake itself (or a lost node): the next run
stops with "Directory cannot be locked"; the same command with --unlock releases it; the run
after that continues, and nothing journaled is asked for again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from harness import shardkit as kit
from helpers import REPO, WITHOUT_EXPORT, endpoint_config, snakemake, wait_for, write_config

from rewardprof.store.journal import scan_journal
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow


def _journaled_ok(journal: Path) -> int:
    if not journal.exists():
        return 0
    keys = scan_journal(journal).keys.to_pandas()
    return int((keys["status"] == "ok").sum())


def test_sigkill_of_snakemake_needs_unlock_then_continues(tmp_path):
    kit.write_source(tmp_path / "data/m.jsonl", 6)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    with FakeOpenAI(kit.answer) as server:
        cfg = endpoint_config(server.base_url, entries, num_shards=1, rollout={"concurrency": 1})
        cfg["engine"]["max_n"] = 1
        config = write_config(tmp_path, cfg)
        server.hold_after(4)  # 4 rollouts answered, then every request waits: the run cannot end
        controller = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]
            + ["-d", str(tmp_path), "--cores", "2", "--configfile", str(config)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        )
        journal = tmp_path / "results/t/rollouts/journal"
        wait_for(lambda: server.gate_held == 1, "the rollout to wait at the gate")
        wait_for(lambda: _journaled_ok(journal) == 4, "the 4 answers to be journaled")
        # the whole machine goes: Snakemake and its jobs, all with SIGKILL
        tree = [psutil.Process(controller.pid), *psutil.Process(controller.pid).children(True)]
        for proc in tree:
            proc.send_signal(signal.SIGKILL)
        controller.wait(timeout=60)
        psutil.wait_procs(tree, timeout=60)
        answered = server.gate_served  # (re-arming the gate below resets the count)
        server.hold_after(None)

        locked = snakemake(tmp_path, "--configfile", str(config))
        assert locked.returncode != 0
        assert "Directory cannot be locked" in locked.stdout + locked.stderr
        unlock = snakemake(tmp_path, "--unlock", "--configfile", str(config))
        assert unlock.returncode == 0, unlock.stderr[-2000:]
        since = len(server.requests)
        rerun = snakemake(tmp_path, *WITHOUT_EXPORT, "--configfile", str(config))
        assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
        asked = server.requests[since:]
    assert answered == 4
    # the 4 journaled rollouts are not asked for again; the other 8 are, once each
    assert len(asked) == 12 - 4
    assert len(set(kit.request_pairs(asked))) == 8
