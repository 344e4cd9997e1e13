"""SIGKILL of a rollout job in the middle of code verification leaves nothing behind: no
sandboxed process (the program, nor a daemon it forked) and no scratch directory, once the
rerun has finished; the rerun fills the rollout.

The kill lands by construction: the first completion's program forks a daemon, both write a
marker file into their scratch directory and sleep for an hour; the test SIGKILLs the real
`rewardprof rollout` process (that one process, not its group: its verification workers are
orphaned, the harshest case) only once it sees both markers through /proc/<pid>/cwd. The
rerun must verify that rollout again (a killed verification journals nothing), so its
sandbox's start-up sweep runs. Needs root (sandbox uids); with bubblewrap the processes are
gone at once (the worker dies with the job, bwrap with the worker), with the launcher fallback
by the rerun's sweep at the latest.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit
from helpers import require_piece

from rewardprof.environments.sandbox.cleanup import PREFIX, UID_BASE, runs, start_time
from rewardprof.manifest.load import validate_config
from rewardprof.stages import MaterializePaths, materialize
from rewardprof.testing.fake_server import FakeOpenAI

MODEL = "fake-model"
LIVENESS_S = 120  # a wedged attempt fails the test instead of hanging CI; not a speed bound


@pytest.fixture(autouse=True)
def need_root():
    require_piece("root (the sandbox's uids and namespaces)", os.geteuid() == 0)


def sleeper(marker: str) -> str:
    return (
        "```python\nimport os, time\n"
        "if os.fork() == 0:\n"
        f"    open('{marker}-daemon', 'w').close()\n"
        "    time.sleep(3600)\n"
        f"open('{marker}-program', 'w').close()\n"
        "time.sleep(3600)\n```"
    )


HONEST = "```python\nprint('done')\n```"


def marked_processes(marker: str) -> dict[int, int]:
    """pid -> uid of the sandboxed processes whose working directory holds a marker file."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            if uid < UID_BASE:
                continue
            names = os.listdir(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # exited meanwhile, or not ours to read
        if state not in ("Z", "X") and any(n.startswith(marker) for n in names):
            found[int(entry)] = uid
    return found


def children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def alive(pid: int, started: int | None) -> bool:
    return started is not None and runs(pid, started)


def code_config(base_url: str, mechanism: str):
    """One code task, one rollout, one verification worker, on the fake server."""
    return validate_config(
        {
            "run": "k",
            "num_shards": 1,
            "entries": [
                {
                    "label": "c",
                    "environment": "code",
                    "source": "data/code.jsonl",
                    "num_repeats": 1,
                    "options": {"timeout_s": 3600, "sandbox": mechanism},
                }
            ],
            "engine": {"mode": "endpoint", "base_url": base_url, "model": MODEL},
            "rollout": {"verify_workers": 1, "progress_interval_s": 3600},
        },
        origin="test",
    )


def wait_until_gone(started: dict[int, int | None], what: str) -> None:
    """Poll until none of `started` (pid -> start time) runs (the kernel kills
    asynchronously); fail past the liveness bound."""
    deadline = time.monotonic() + LIVENESS_S
    while any(alive(p, s) for p, s in started.items()):
        assert time.monotonic() < deadline, f"{what} outlived the job"
        time.sleep(0.05)


@pytest.mark.parametrize("mechanism", ["bubblewrap", "launcher"])
def test_sigkill_during_code_verification_leaves_nothing(tmp_path, mechanism):
    if mechanism == "bubblewrap":
        require_piece("bubblewrap", shutil.which("bwrap") is not None, "apt-get install bubblewrap")
    marker = f"rewardprof-kill-{secrets.token_hex(4)}"
    (tmp_path / "data").mkdir()
    row = {"question": "Print done.", "tests": [{"input": "", "output": "done\n"}]}
    (tmp_path / "data" / "code.jsonl").write_text(json.dumps(row) + "\n")
    answers = iter([sleeper(marker)])
    with FakeOpenAI(answer=lambda prompt, seed: next(answers, HONEST), model=MODEL) as server:
        cfg = code_config(server.base_url, mechanism)
        tasks = tmp_path / "tasks.parquet"
        materialize.run(
            cfg, MaterializePaths(tasks=tasks, report=tmp_path / "report.json", base_dir=tmp_path)
        )
        out = tmp_path / "out.parquet"
        cmd = kit.rollout_command(cfg, tasks, tmp_path / "journal", out)
        job = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE)
        deadline = time.monotonic() + LIVENESS_S
        while len(found := marked_processes(marker)) < 2:
            assert job.poll() is None, job.stderr.read().decode()[-2000:] if job.stderr else ""
            assert time.monotonic() < deadline, "the program never started in its sandbox"
            time.sleep(0.05)
        started = {pid: start_time(pid) for pid in found}
        workers = children(job.pid)
        scratch = [
            p
            for p in Path("/tmp").glob(f"{PREFIX}*")
            if any(p.name.startswith(f"{PREFIX}{w}-") for w in workers)
        ]
        assert scratch, "the verification worker's scratch directory was not found"

        verifying = [w for w in workers if any(p.name.startswith(f"{PREFIX}{w}-") for p in scratch)]
        worker_started = {w: start_time(w) for w in verifying}
        os.kill(job.pid, signal.SIGKILL)  # the job alone: its workers are orphaned
        assert job.wait(LIVENESS_S) == -signal.SIGKILL
        # the workers die with the job (parent-death signal; polled: the kernel delivers it as
        # the job exits, the worker ends a moment later); the rerun's sweep needs them gone
        wait_until_gone(worker_started, "verification workers")
        if mechanism == "bubblewrap":
            # gone at once: the worker dies with the job, bwrap with the worker, the PID
            # namespace with bwrap
            wait_until_gone(started, "sandboxed processes")

        rerun = subprocess.run(cmd, capture_output=True, timeout=LIVENESS_S, check=False)
        assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]

    assert [p for p, s in started.items() if alive(p, s)] == []
    assert marked_processes(marker) == {}
    assert [str(p) for p in scratch if p.exists()] == []
    records = pq.read_table(out).to_pylist()
    assert [(r["status"], r["reward"]) for r in records] == [("ok", 1.0)]
