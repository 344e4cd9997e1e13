"""atomic_path removes the temp file of a writer that died (its pid is gone), never a live
writer's: the pids are of real processes, one finished and one running (L1: it starts them)."""

from __future__ import annotations

import socket
import subprocess
import sys

from rewardprof.core.atomic import atomic_path


def test_a_killed_writers_temp_file_is_removed_by_the_next_writer(tmp_path):
    final = tmp_path / "tasks.parquet"
    host = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid is free now: a writer SIGKILLed mid-write
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_tmp = tmp_path / f".tasks.parquet.tmp-{host}-{gone.pid}"
        dead_dir = tmp_path / f".tasks.parquet.tmp-{host}-{gone.pid + 1000000}"  # a dataset dir
        live_tmp = tmp_path / f".tasks.parquet.tmp-{host}-{live.pid}"
        other_host = tmp_path / f".tasks.parquet.tmp-{host}x-{gone.pid}"
        dead_tmp.write_text("half")
        dead_dir.mkdir()
        (dead_dir / "part-0.parquet").write_text("half")
        live_tmp.write_text("being written")
        other_host.write_text("another node's writer")
        with atomic_path(final) as tmp:
            tmp.write_text("whole")
        assert final.read_text() == "whole"
        assert not dead_tmp.exists() and not dead_dir.exists()
        assert live_tmp.exists() and other_host.exists()  # not ours to judge
    finally:
        live.kill()
        live.wait()
