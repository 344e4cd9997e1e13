"""The start-up sweep: scratch directories of workers that no longer run are removed (with
what those workers' uids still run), those of running workers are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rewardprof.environments.sandbox.cleanup import PREFIX, start_time, sweep_stale


def test_sweep_removes_only_what_dead_workers_left(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_started = start_time(dead.pid)
    dead.wait()  # reaped: its pid names no running process now
    mine = os.getpid()
    dirs = {
        "dead": tmp_path / f"{PREFIX}{dead.pid}-{dead_started}-abc",
        "running": tmp_path / f"{PREFIX}{mine}-{start_time(mine)}-abc",
        # a running pid with another start time: the pid was reused, the worker is gone
        "reused": tmp_path / f"{PREFIX}{mine}-{start_time(mine) + 1}-abc",
        "unnamed_old": tmp_path / f"{PREFIX}xyz",  # no owner in its name: never ours to remove
    }
    for d in dirs.values():
        (d / "0" / "scratch").mkdir(parents=True)
    hours_ago = time.time() - 2 * 3600
    os.utime(dirs["unnamed_old"], (hours_ago, hours_ago))
    killed: list[int] = []
    removed = sweep_stale(killed.append, tmp=str(tmp_path))
    assert sorted(removed) == sorted(str(dirs[k]) for k in ("dead", "reused"))
    assert {k for k, d in dirs.items() if d.exists()} == {"running", "unnamed_old"}
    assert killed == []  # no process runs under those workers' uids
