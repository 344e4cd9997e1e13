"""Progress under `snakemake --cores`: while rollout jobs run, the controller's output carries
the whole run's progress line (each rollout job prints it to stdout every
`rollout.progress_interval_s`; the rules send only stderr to the log), and `rewardprof status`
on the run directory shows the jobs running, then the run finished.

"While they run" lands by construction: the fake server answers one request and holds every
later one until the test has seen the line and taken the status."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from harness import shardkit as kit
from helpers import endpoint_config, popen_snakemake, wait_for, write_config

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow


def _status(workdir: Path) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "rewardprof.cli", "status", "results/t"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_snakemake_output_shows_the_runs_progress_and_status_follows(tmp_path):
    kit.write_source(tmp_path / "data" / "m.jsonl", 6)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    with FakeOpenAI(kit.answer) as server:
        cfg = endpoint_config(
            server.base_url, entries, num_shards=2, rollout={"progress_interval_s": 0.3}
        )
        config = write_config(tmp_path, cfg)
        server.hold_after(1)
        proc = popen_snakemake(tmp_path, "--configfile", str(config))
        lines: list[str] = []

        def read() -> None:
            for ln in proc.stdout:
                lines.append(ln)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            wait_for(
                lambda: any(ln.startswith("rewardprof: rollouts ") for ln in lines),
                "the run's progress line in Snakemake's output",
            )
            wait_for(lambda: server.gate_held >= 1, "a held request")
            mid = _status(tmp_path)
        finally:
            server.hold_after(None)
        proc.wait(timeout=600)
        reader.join(60)
    output = "".join(lines)
    assert proc.returncode == 0, output[-3000:]
    line = next(ln for ln in lines if ln.startswith("rewardprof: rollouts "))
    assert "/12 (" in line and "shards running" in line and "ETA" in line
    assert "/12 rollouts (" in mid and " running " in mid
    end = _status(tmp_path)
    assert "12/12 rollouts (100.0%), 12 ok" in end
    assert "2 of 2 done, 0 running, 0 stopped" in end
