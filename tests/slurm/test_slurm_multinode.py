"""A model larger than a node on the local Slurm cluster (two slurmd on this host,
scripts/local-slurm.sh): a 2-node allocation runs serve mode with `engine.nodes: 2`. Its head
(rank 0) and its headless worker (rank 1) are job steps started with srun on the two nodes;
they are the vLLM stand-in (rewardprof.testing.vllm_standin), whose head answers /health only
once the worker joined it over --master-addr/--master-port. The job's client gets an answer
from the head; when the job ends, or is cancelled mid-serve, no process of the launch is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import require_piece
from slurm_helpers import slurm_available

from rewardprof.engine.host import processes_with_env
from rewardprof.engine.server import TOKEN_ENV
from rewardprof.testing.vllm_standin import write_standin_python

pytestmark = pytest.mark.slurm

JOB = """#!{python}
#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --mem=500 --time=10
import json, socket, sys, time, urllib.request
from pathlib import Path
import yaml
from rewardprof.manifest.load import validate_config
from rewardprof.engine.multinode import ports_on, serve_nodes

out = Path(sys.argv[1])
cfg = validate_config(yaml.safe_load((out / "config.yaml").read_text()))
held = socket.socket()  # "taken": the first API port handed out is one this job listens on
held.bind(("0.0.0.0", 0))
held.listen()
handed = []
def ports(node):
    api, master = ports_on(node)
    handed.append(api)
    return (held.getsockname()[1] if sys.argv[2] == "taken" and len(handed) == 1 else api), master
with serve_nodes(cfg, out / "engine.log", ports=ports) as server:
    (out / "token").write_text(server.token)
    body = {{"model": "sim-model", "n": 2, "seed": 1, "max_tokens": 50,
             "messages": [{{"role": "user", "content": "What is 2 + 3?"}}]}}
    req = urllib.request.Request(server.base_urls[0] + "/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={{"Content-Type": "application/json"}})
    reply = json.load(urllib.request.urlopen(req, timeout=120))
    ready = {{"urls": server.base_urls, "choices": len(reply["choices"]),
              "steps": [[s.node, s.rank, s.argv] for r in server.replicas for s in r.steps]}}
    # whole, then renamed: the test reads it the moment it exists
    (out / "ready.partial").write_text(json.dumps(ready))
    (out / "ready.partial").rename(out / "ready.json")
    if sys.argv[2] == "hold":
        time.sleep(600)  # until scancel
"""


@pytest.fixture(scope="module", autouse=True)
def two_nodes():
    ok, why = slurm_available()
    require_piece("local Slurm cluster", ok, why)
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True)
    count = len(set(nodes.stdout.split()))
    require_piece(
        "a 2-node local Slurm cluster",
        count >= 2,
        f"{count} node(s); run LOCAL_SLURM_NODES=2 scripts/local-slurm.sh start",
    )


def _submit(tmp_path: Path, hold: bool, mode: str = "") -> tuple[str, Path]:
    python = write_standin_python(tmp_path / "standin")
    cfg = {
        "run": "multinode",
        "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
        "engine": {
            "mode": "serve",
            "model": "sim-model",
            "python": str(python),
            "nodes": 2,
            "serve_args": ["--tensor-parallel-size", "1", "--pipeline-parallel-size", "2"],
            "serve_env": {"REWARDPROF_SIM_ARGS": "--time-scale 600"},
            "startup_timeout_s": 300,
            "stop_grace_s": 5,
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    script = tmp_path / "job.py"
    script.write_text(JOB.format(python=sys.executable))
    cmd = ["sbatch", "--parsable", "-o", str(tmp_path / "job.out"), "-D", str(tmp_path)]
    if not hold:
        cmd.append("--wait")
    cmd += [str(script), str(tmp_path), mode or ("hold" if hold else "exit")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stderr, _read(tmp_path / "job.out"))
    return proc.stdout.strip().split(";")[0], tmp_path


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else f"({path.name} missing)"


def _check_served(work: Path) -> str:
    ready = json.loads((work / "ready.json").read_text())
    assert ready["choices"] == 2
    steps = ready["steps"]
    assert [(node.endswith("-n2"), rank) for node, rank, _ in steps] == [(False, 0), (True, 1)]
    head_argv, worker_argv = steps[0][2], steps[1][2]
    assert "--headless" not in head_argv and "--headless" in worker_argv
    for argv, rank in ((head_argv, "0"), (worker_argv, "1")):
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == rank
    assert (
        head_argv[head_argv.index("--master-port") + 1]
        == worker_argv[worker_argv.index("--master-port") + 1]
    )
    log = _read(work / "engine.log")
    # both ports found free on the head node itself (a job step there), as the lines use them
    api, master = (head_argv[head_argv.index(flag) + 1] for flag in ("--port", "--master-port"))
    assert f"ports {api} (API) and {master} (master) free on its head {steps[0][0]}" in log, log
    # the worker joined before the head served: the head's /health waited for it
    assert "node rank 1 joined" in log, log
    assert f"on {steps[1][0]} joined" in log, log
    return (work / "token").read_text()


def test_a_two_node_replica_serves_and_its_job_leaves_no_process(tmp_path):
    job, work = _submit(tmp_path, hold=False)
    token = _check_served(work)
    assert processes_with_env(f"{TOKEN_ENV}={token}") == []
    out = _read(work / "job.out")
    assert "Traceback" not in out, out


def test_a_port_taken_on_the_head_before_its_step_binds_it_gets_new_ports(tmp_path):
    """The race of a port found free and bound later, made to land: the job listens on the
    first API port it hands out. The head's step cannot bind it, the launch is stopped and made
    again on new ports, and the replica serves."""
    job, work = _submit(tmp_path, hold=False, mode="taken")
    token = _check_served(work)
    log = _read(work / "engine.log")
    assert "address already in use" in log.lower(), log
    assert log.count("(master) free on its head") == 2, log
    assert "new ports (1/3)" in _read(work / "job.out")
    assert processes_with_env(f"{TOKEN_ENV}={token}") == []


def test_cancelling_the_job_mid_serve_leaves_no_process(tmp_path):
    job, work = _submit(tmp_path, hold=True)
    deadline = time.monotonic() + 600
    while not (work / "ready.json").exists():
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                               text=True).stdout.strip()  # fmt: skip
        assert state in ("PENDING", "RUNNING", "CONFIGURING"), (state, _read(work / "job.out"))
        assert time.monotonic() < deadline, _read(work / "job.out")
        time.sleep(0.5)
    token = _check_served(work)
    assert processes_with_env(f"{TOKEN_ENV}={token}")  # serving now
    subprocess.run(["scancel", job], check=True, timeout=60)
    while subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                         text=True).stdout.strip() in ("RUNNING", "COMPLETING"):  # fmt: skip
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert processes_with_env(f"{TOKEN_ENV}={token}") == []
