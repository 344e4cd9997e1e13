"""Helpers shared by the test layers (imported as `helpers`; conftest.py holds fixtures only,
so per-directory conftest files never shadow these). Tests that need a piece (engine, Slurm)
skip on a laptop without it, but under CI=true a missing piece is a failure, never a skip."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_piece(name: str, available: bool, how: str = "") -> None:
    """Skip (laptop) or fail (CI=true) when a piece the test needs is missing."""
    if available:
        return
    msg = f"{name} is not available{': ' + how if how else ''}"
    if IN_CI:
        pytest.fail(f"CI=true: {msg}")
    pytest.skip(msg)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def math_row(question: str, answer: str) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": question}]},
        "expected_answer": answer,
    }


def _snakemake_call(workdir: Path, args: tuple[str, ...], env: dict | None):
    """The command line and environment that run the real Snakefile in `workdir`."""
    import sys

    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--cores",
        "2",
        *args,
    ]
    full_env = dict(os.environ)
    # the rules call `rewardprof`; make sure the venv's bin is on PATH
    full_env["PATH"] = f"{Path(sys.executable).parent}:{full_env.get('PATH', '')}"
    full_env.update(env or {})
    return cmd, full_env


# For runs whose point lies upstream of the export and the report (resume, resharding, failures,
# adaptive sampling): `--omit-from` leaves those jobs out (~2.5 s of the ~10 s of CPU a small run
# costs; the report job alone ~1.5 s). Their own tests run them: test_workflow.py's exact run,
# test_export.py, test_secrets.py and the documented commands. `--omit-from` takes every value
# after it, as `--configfile` does: targets go before it.
WITHOUT_REPORT = ("--omit-from", "report")
WITHOUT_EXPORT = ("--omit-from", "export")  # the report reads the export: neither runs


def snakemake(
    workdir: Path,
    *args: str,
    timeout: float = 600,
    env: dict | None = None,
    stage_server: bool = True,
):
    """Run the real Snakefile in `workdir` (its CLI, like a user); returns CompletedProcess. The
    process is forked from a server that imported Snakemake once (harness/preloaded.py), and so
    are its jobs' `rewardprof` commands (harness/stage_server.py; `stage_server` False: each a
    new interpreter), unless `env` sets a PYTHON* variable: read when an interpreter starts, it
    needs new ones."""
    import subprocess

    from harness import stage_server as server
    from harness.preloaded import run_snakemake

    cmd, full_env = _snakemake_call(workdir, args, env)
    if any(name.startswith("PYTHON") for name in env or {}):
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=workdir
        )
    if stage_server:
        full_env.update(server.job_env(full_env["PATH"]))
    return run_snakemake(cmd, workdir, full_env, timeout)


def popen_snakemake(workdir: Path, *args: str, env: dict | None = None):
    """Start the real Snakefile in `workdir` without waiting: a Popen whose stdout carries
    Snakemake's output and stderr, as a terminal would show them."""
    import subprocess

    cmd, full_env = _snakemake_call(workdir, args, env)
    return subprocess.Popen(
        cmd,
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
    )


def endpoint_config(base_url: str, entries: list[dict], **overrides) -> dict:
    cfg = {
        "run": "t",
        "num_shards": 2,
        "entries": entries,
        "engine": {"mode": "endpoint", "base_url": base_url, "model": "fake-model"},
        "rollout": {
            "concurrency": 4,
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.05,
            "verify_workers": 1,
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


def write_config(workdir: Path, cfg: dict) -> Path:
    import yaml

    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def wait_for(predicate, what: str, timeout: float = 300) -> None:
    """Poll until `predicate()` holds. A liveness bound only: the tests reach the state they
    wait for by construction (a request held at the fake server's gate, a file written)."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
