"""L2 lifecycle: a real `rewardprof rollout` job in serve mode, each starting its own real vLLM.

The server dying mid-run fails the shard with the server's last log lines; SIGTERM to the job
stops its server (no process left, port free). They run after test_real_engine.py's shared
server has stopped, so at most one server runs at a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from engine_helpers import MODEL, assert_gone, make_shard, models_dir, new_mark

from rewardprof.engine.host import processes_with_env

pytestmark = [pytest.mark.engine, pytest.mark.slow]
_ = models_dir  # a fixture (imported to be found)


def _start_job(models_dir: Path, tmp: Path) -> tuple[subprocess.Popen, str, Path, Path]:
    data, shard = make_shard(tmp, 4)
    name, value, needle = new_mark()
    # every sample is exactly 400 tokens (min_tokens): once its requests run, the job needs 400
    # decode steps, far longer than the moment between seeing them run and the kill
    data["engine"] = {
        "mode": "serve",
        "model": f"builtin:{MODEL}",
        "models_dir": str(models_dir),
        "serve_env": {name: value},
        "stop_grace_s": 10,
        "startup_timeout_s": 600,
        "extra_body": {"min_tokens": 400},
    }
    data["sampling"] = {"max_tokens": 400, "seed": 0}
    data["rollout"] = {"concurrency": 2, "verify_workers": 1}
    err = tmp / "rollout.log"
    cmd = [
        sys.executable,
        "-m",
        "rewardprof.cli",
        "rollout",
        "--config-json",
        json.dumps(data),
        "--tasks",
        str(shard),
        "--journal",
        str(tmp / "journal"),
        "--out",
        str(tmp / "out.parquet"),
        "--shard",
        "0",
        "--num-shards",
        "1",
        "--engine-log",
        str(tmp / "engine.log"),
    ]
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err.open("w"), cwd=tmp)
    deadline = time.monotonic() + 600
    while " ready at " not in err.read_text():
        assert job.poll() is None, err.read_text()[-3000:]
        assert time.monotonic() < deadline, "the rollout job's server never became ready"
        time.sleep(0.5)
    # the kill moment from observed progress, not a sleep: the engine is running the job's
    # requests (it cannot have finished; a fast machine only gets there sooner)
    port = _port(tmp / "engine.log")
    while _requests_running(port) < 1:
        assert job.poll() is None, err.read_text()[-3000:]
        assert time.monotonic() < deadline, "the job's requests never started"
        time.sleep(0.1)
    return job, needle, err, tmp / "engine.log"


def _requests_running(port: int) -> float:
    """vLLM's own gauge of requests being decoded now (its Prometheus /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        lines = r.read().decode().splitlines()
    return sum(
        float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("vllm:num_requests_running")
    )


def _port(engine_log: Path) -> int:
    line = [x for x in engine_log.read_text().splitlines() if "starting vLLM on port" in x][-1]
    return int(line.split("starting vLLM on port ")[1].split(":")[0])


def test_server_dying_mid_run_fails_the_shard_with_the_server_log(models_dir, tmp_path):
    job, needle, err, engine_log = _start_job(models_dir, tmp_path)
    try:
        api = [
            p
            for p in processes_with_env(needle)
            if b"api_server" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        assert len(api) == 1
        os.kill(api[0], signal.SIGKILL)
        assert job.wait(timeout=120) != 0
    finally:
        job.kill()
    text = err.read_text()
    assert "vLLM server exited with code -9 during the run" in text
    assert "last log lines:" in text and "(APIServer pid=" in text  # the server's own lines
    assert not (tmp_path / "out.parquet").exists()
    assert_gone(needle, _port(engine_log), err)


def test_sigterm_to_the_rollout_job_stops_its_server(models_dir, tmp_path):
    job, needle, err, engine_log = _start_job(models_dir, tmp_path)
    try:
        assert processes_with_env(needle)
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=60) == 128 + signal.SIGTERM, err.read_text()[-2000:]
    finally:
        job.kill()
    assert "vLLM stopped" in err.read_text()
    assert_gone(needle, _port(engine_log), err)
