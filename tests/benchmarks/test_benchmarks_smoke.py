"""Smoke tests of benchmarks/: each script runs at its small size and prints its one result
line. They check that the benchmarks keep working, never a time (docs/benchmarks.md has the
numbers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import stage_server

REPO = Path(__file__).resolve().parents[2]


def run_bench(script: str, tmp_path: Path, *args: str, timeout: float = 300) -> str:
    env = dict(os.environ, REWARDPROF_BENCH_DIR=str(tmp_path))
    # the benchmark's workflow runs find `rewardprof` on PATH: forked from the stage server
    # (harness/stage_server.py), as helpers.snakemake's runs
    env |= stage_server.job_env(f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--small", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    return lines[0]


@pytest.mark.parametrize(
    "script, prefix",
    [
        ("bench_materialize.py", "materialize: size 1/"),
        ("bench_resume.py", "resume: first new request"),
        ("bench_merge_profile.py", "merge+profile: "),
        ("bench_dag.py", "dag: snakemake -n with 8 shards"),
        ("bench_client.py", "client: trivial verifier"),
        ("bench_engine.py", "engine: pipeline"),
        ("bench_adaptive.py", "adaptive: 2000 tasks x K=16: exact"),
        ("bench_balancer.py", "balancer: client "),
        ("bench_verify_stall.py", "verify-stall: worst "),
        ("bench_first_round_order.py", "first round: 64 tasks, 16 slots: first come "),
        ("bench_episodes.py", "tool latency    1 s: 64 episodes (64 ok), 256 turns, 192 calls"),
    ],
)
def test_benchmark_runs_and_prints_its_result(script, prefix, tmp_path):
    line = run_bench(script, tmp_path)
    assert line.startswith(prefix), line


def test_bench_fleet_runs_both_shapes_through_the_workflow(tmp_path):
    """Two shard jobs with an engine each, then the same tasks on a 2-replica fleet: the
    workflow completes both ways with identical rewards (the script checks) and reports."""
    line = run_bench("bench_fleet.py", tmp_path, timeout=1200)
    assert line.startswith("fleet bench: 2 simulated engines x 64 slots"), line
    assert "fixed: rollouts per engine-hour held fleet/per-shard" in line
