"""The stage server the workflow tests' jobs run their `rewardprof` commands through
(harness/stage_server.py) ends a command as a new interpreter would: the same output and exit
code, the signal the job gets reaching the command, and a job killed outright taking its command
along. The workflow tests' outputs prove what the commands do; this proves how they end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import stage_server

REAL = str(Path(sys.executable).parent / "rewardprof")


def _env() -> dict[str, str]:
    return dict(os.environ) | stage_server.job_env(os.environ["PATH"])


def _working_in(directory: Path) -> list[int]:
    """The processes whose working directory is `directory` (the shim, and the command the
    server forked, which moved there: its /proc environ is the server's, its cwd its own)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == directory.resolve():
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


@pytest.mark.parametrize(
    "args",
    [["schema"], ["validate", "--config-json", "{bad"], ["shard", "--shard", "5"]],
    ids=["ok", "bad-input", "usage"],
)
def test_a_command_ends_with_the_real_ones_output_and_exit_code(args, tmp_path):
    env = _env()  # the server started
    before = stage_server.commands_run()
    shim = subprocess.run(["rewardprof", *args], env=env, cwd=tmp_path, capture_output=True)
    real = subprocess.run([REAL, *args], cwd=tmp_path, capture_output=True)
    assert (shim.returncode, shim.stdout, shim.stderr) == (
        real.returncode, real.stdout, real.stderr
    )  # fmt: skip
    assert stage_server.commands_run() == before + 1  # the server ran it, and counted its CPU


def _watching(tmp_path: Path) -> subprocess.Popen:
    """`rewardprof status --watch` of a run that never finishes, through the shim, once it has
    printed its first snapshot (the command is running)."""
    (tmp_path / "results/t").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        ["rewardprof", "status", "--watch", "0.1", "--num-shards", "2", "results/t"],
        env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and "results/t at" in proc.stdout.readline().decode()
    return proc


@pytest.mark.parametrize(
    ("sig", "returncode"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 0)]
)
def test_a_signal_to_the_job_reaches_the_command(sig, returncode, tmp_path):
    """SIGTERM kills `status --watch` (its default action) and the shim ends killed by it;
    SIGINT is its Ctrl-C, which it takes as the end of watching (exit 0)."""
    proc = _watching(tmp_path)
    assert len(_working_in(tmp_path)) == 2  # the shim and the command
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == returncode
    proc.communicate()
    assert _working_in(tmp_path) == []


def test_a_job_killed_outright_takes_its_command_along(tmp_path):
    proc = _watching(tmp_path)
    (command,) = set(_working_in(tmp_path)) - {proc.pid}
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 30  # the handler sees the shim's socket close, kills at once
    while command in _working_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert command not in _working_in(tmp_path)
