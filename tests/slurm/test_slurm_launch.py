"""`rewardprof launch`: the Snakemake controller as a submitit job, requeued on timeout/preemption
(USR2 -> checkpoint: Snakemake cancels its jobs; the requeued controller reruns with
--rerun-incomplete and the rollouts continue from their journals)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from helpers import (
    WITHOUT_EXPORT,
    endpoint_config,
    math_row,
    require_piece,
    snakemake,
    write_config,
    write_jsonl,
)
from slurm_helpers import (
    REPO,
    last_job_id,
    profile_args,
    scheduled_rules,
    slurm_available,
    slurm_jobs,
    submitted,
)

from rewardprof.store.journal import scan_journal
from rewardprof.testing.fake_server import FakeOpenAI, scripted

N_TASKS, K = 10, 4


def _setup(tmp_path: Path, base_url: str) -> Path:
    write_jsonl(
        tmp_path / "data" / "m.jsonl",
        [math_row(f"What is {i} + {i}?", str(2 * i)) for i in range(N_TASKS)],
    )
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    cfg = endpoint_config(base_url, entries, rollout={"concurrency": 2, "segment_interval_s": 0.5})
    cfg["engine"]["max_n"] = 1  # one request per rollout, so a stop lands mid-shard
    return write_config(tmp_path, cfg)


def _ok_count(journal: Path) -> int:
    if not journal.exists():
        return 0
    keys = scan_journal(journal).keys.to_pandas()
    return int((keys["status"] == "ok").sum())


def _check_outputs(tmp_path: Path, requests: list[dict], stopped_at: float) -> None:
    """Complete, no duplicates; what the stopped attempt journaled was requested only once."""
    rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
    keys = list(zip(rollouts["task_index"], rollouts["rollout_index"], strict=True))
    assert len(keys) == len(set(keys)) == N_TASKS * K
    assert rollouts["status"].eq("ok").all()
    assert (tmp_path / "results/t/profile/tasks.parquet").exists()
    seeds = pd.Series([b["seed"] for b in requests]).value_counts()
    early = rollouts[rollouts["finished_at"] < stopped_at]  # journaled before the stop
    assert len(early) >= 6
    assert (seeds.reindex(early["seed"]).fillna(0) == 1).all(), "a journaled rollout was redone"
    # re-sent: at most the requests in flight when stopped, one per concurrency slot (2 shard
    # jobs x concurrency 2): a slot's request held at the gate, or answered but not journaled,
    # is requested again by the next attempt; nothing else is
    assert len(requests) - N_TASKS * K <= 4


@pytest.mark.workflow
def test_launch_local_executor_requeue_resumes(tmp_path, monkeypatch):
    """submitit's local executor: USR2 (what Slurm sends before the time limit) mid-rollout ->
    checkpoint -> requeue -> the second attempt finishes without redoing journaled rollouts."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        require_piece("submitit (the slurm extra)", False, "pip install -e '.[slurm]'")
    from rewardprof.tools.launch import LaunchOptions, launch

    with FakeOpenAI(scripted({}, default="\\boxed{0}"), latency_s=0.1) as server:
        # 16 of the 40 answers, then the rest held until the checkpoint has begun: the stop
        # lands mid-rollout by construction, however fast or slow the machine
        server.hold_after(16)
        cfg = _setup(tmp_path, server.base_url)
        opts = LaunchOptions(cluster="local", log_dir=str(tmp_path / "launch"), time_min=30)
        # submitit's local job inherits our environment; the rules call `rewardprof`
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        job = launch(
            [
                "-s",
                str(REPO / "Snakefile"),
                "--cores",
                "2",
                *WITHOUT_EXPORT,
                "--configfile",
                str(cfg),
            ],
            opts,
            workdir=str(tmp_path),
        )
        journal = tmp_path / "results/t/rollouts/journal"
        deadline = time.time() + 240  # liveness only
        while time.time() < deadline and not (_ok_count(journal) >= 6 and server.gate_held):
            assert not job.done(), job.stdout()
            time.sleep(0.2)
        assert server.gate_held, "the rollouts never reached the held answers"
        # the controller is the task process submitit's local runner started
        runner = psutil.Process(job._process.pid)
        task = next(p for p in runner.children() if "submitit" in " ".join(p.cmdline()))
        stopped_at = time.time()
        task.send_signal(signal.SIGUSR2)
        # the checkpoint has begun with the rollouts mid-shard; now every answer is served
        # (Snakemake's local executor lets running jobs finish on SIGINT: attempt 0's rollouts
        # may complete before attempt 1 starts, which every check below allows)
        deadline = time.time() + 120  # liveness only
        while "checkpoint at attempt 0" not in (job.stdout() or "") and time.time() < deadline:
            time.sleep(0.2)
        server.hold_after(None)
        assert job.result() == 0
        requests = list(server.requests)
    log = job.stdout() or ""
    assert "checkpoint at attempt 0" in log, log[-3000:]
    assert "attempt 1," in log, log[-3000:]
    _check_outputs(tmp_path, requests, stopped_at)


@pytest.mark.slurm
def test_launch_slurm_controller_runs_workflow_and_survives_requeue(tmp_path):
    """`rewardprof launch --slurm`: the controller is a Slurm job whose Snakemake submits the
    workflow's jobs; USR2 (as at the time limit) requeues it; the run still completes."""
    ok, why = slurm_available()
    require_piece("local Slurm cluster", ok, why)
    log_dir = tmp_path / "launch"
    with FakeOpenAI(scripted({}, default="\\boxed{0}"), latency_s=0.1) as server:
        cfg = _setup(tmp_path, server.base_url)
        # tasks and shards locally (on Slurm in test_profile): here the controller matters
        r = snakemake(tmp_path, "--configfile", str(cfg), "--until", "shard")
        assert r.returncode == 0, r.stderr[-3000:]
        # 16 of the 40 answers, then the rest held until the controller has been requeued: the
        # USR2 lands with rollouts mid-shard by construction, however fast the machine
        server.hold_after(16)
        before = last_job_id()
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "rewardprof.cli",
                "launch",
                "--slurm",
                "--time",
                "30",
                "--mem-gb",
                "1",
                "--log-dir",
                str(log_dir),
                "--",
                "-s",
                str(REPO / "Snakefile"),
                *WITHOUT_EXPORT,  # the controller is the point: export and report add 2 jobs
                "--configfile",
                str(cfg),
                *profile_args(tmp_path),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        ctrl = int(re.search(r"as job (\d+)", r.stdout).group(1))
        assert f"scancel {ctrl}" in r.stdout and "tail -f" in r.stdout  # how to follow it

        journal = tmp_path / "results/t/rollouts/journal"
        deadline = time.time() + 300  # liveness only
        while time.time() < deadline and not (_ok_count(journal) >= 6 and server.gate_held):
            time.sleep(0.3)
        assert _ok_count(journal) >= 6, "rollouts never started"
        assert server.gate_held, "the rollouts never reached the held answers"
        stopped_at = time.time()
        subprocess.run(["scancel", "--signal=USR2", str(ctrl)], check=True)
        # Slurm holds a requeued job for the credential lifetime (AuthInfo cred_expire: 120 s
        # by default, 20 s on the local cluster), then starts it again by itself
        deadline = time.time() + 180  # liveness only
        while time.time() < deadline and int(_job(ctrl).get("Restarts", "0")) < 1:
            time.sleep(0.5)
        # the first controller has checkpointed (its Snakemake cancelled the held rollout jobs)
        # and is requeued: now every answer is served
        server.hold_after(None)
        assert int(_job(ctrl).get("Restarts", "0")) >= 1, _job(ctrl)
        result = log_dir / str(ctrl) / f"{ctrl}_0_result.pkl"
        deadline = time.time() + 600
        while time.time() < deadline and not result.exists():
            time.sleep(1)
        requests = list(server.requests)
    out = (log_dir / str(ctrl) / f"{ctrl}_0_log.out").read_text()
    assert result.exists(), out[-3000:]
    assert "checkpoint at attempt 0" in out and "attempt 1," in out, out[-3000:]
    from submitit.core.utils import pickle_load

    status, value = pickle_load(result)
    assert status == "success" and value == 0, value

    # every job the controllers' Snakemake sent to the cluster is a Slurm job of that rule
    err = (log_dir / str(ctrl) / f"{ctrl}_0_log.err").read_text()
    remote, _ = scheduled_rules(err)
    assert "rollout" in remote, err[-3000:]
    ids = submitted(err)
    jobs = {j.job_id: j for j in slurm_jobs(before)}
    assert set(ids.values()) == remote - {"all"}, (ids, remote)
    for jid, rule in ids.items():
        assert jobs[jid].rule == rule, jobs[jid]
    # the first controller cancelled its rollout jobs; the second one's jobs completed
    states = sorted((jobs[j].comment, jobs[j].state) for j in ids if ids[j] == "rollout")
    assert [s for _, s in states].count("CANCELLED") >= 1, states
    assert all(jobs[j].state == "COMPLETED" for j in ids if ids[j] != "rollout"), jobs
    _check_outputs(tmp_path, requests, stopped_at)


def _job(job_id: int) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True, timeout=30
    ).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


@pytest.mark.slurm
def test_launch_wait_reports_success_and_failure(tmp_path):
    """`--wait` follows the controller with squeue (no sacct here) and returns its outcome."""
    ok, why = slurm_available()
    require_piece("local Slurm cluster", ok, why)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    procs = {}
    for name, args in (("ok", ["--version"]), ("bad", ["--no-such-option"])):
        procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rewardprof.cli",
                "launch",
                "--slurm",
                "--wait",
                "--time",
                "5",
                "--mem-gb",
                "0.5",
                "--log-dir",
                str(tmp_path / name),
                "--",
                *args,
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    outs = {name: p.communicate(timeout=300)[0] for name, p in procs.items()}
    assert procs["ok"].returncode == 0 and "finished" in outs["ok"], outs["ok"]
    assert procs["bad"].returncode == 1 and "failed" in outs["bad"], outs["bad"]
    assert "snakemake exited with status" in outs["bad"], outs["bad"]
