"""A command whose reader goes away stops quietly: `rewardprof status --watch | head -1` on a run
that never finishes ends when its next snapshot meets the closed pipe, with no traceback and the
status a shell gives a command that SIGPIPE ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REAL = Path(sys.executable).parent / "rewardprof"


def test_a_closed_pipe_ends_status_watch_quietly(tmp_path):
    (tmp_path / "results/t").mkdir(parents=True)
    # the run never finishes, so the watch ends only by the closed pipe
    watch = f"{REAL} status --watch 0.05 --num-shards 2 results/t"
    r = subprocess.run(
        ["bash", "-c", f"{watch} | head -1; echo ${{PIPESTATUS[0]}} >&2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.stdout.startswith("results/t at"), r.stdout
    assert r.stderr == "141\n", r.stderr  # nothing but the watch's exit status
