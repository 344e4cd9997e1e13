"""docs/slurm.md's commands on the tests' Slurm cluster, verbatim, with `slurm` installed as the
shipped profile with only job sizes lowered (the cluster has a few CPUs and GBs) and the first
status check after 3 s:

- the rerun of one failed shard by target, with a custom --configfile: one Slurm job, that
  shard's rollout job, which asks the engine for the failed rollouts only;
- the endpoint-mode recipe (a copy of the profile without the GPU): its rollout jobs ask for no
  GPU and keep the profile's runtime and memory (checked in a dry run: the shipped sizes do not
  fit the test cluster), and merge keeps its 32 GB.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from harness.doc_commands import RERUN_TARGET, blocks, is_task3, scratch_checkout
from helpers import require_piece
from slurm_helpers import (
    FAST_STATUS,
    PROFILE,
    REPO,
    last_job_id,
    sized_profile,
    slurm_available,
    slurm_jobs,
    submitted,
)

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.slurm
SLURM_MD = REPO / "docs" / "slurm.md"


@pytest.fixture(scope="module", autouse=True)
def local_slurm():
    ok, why = slurm_available()
    require_piece("local Slurm cluster", ok, why)


def _block_with(text: str) -> list[str]:
    found = [b for b in blocks(SLURM_MD) if b.is_shell and text in b.text]
    assert len(found) == 1, f"docs/slurm.md: {len(found)} blocks show {text!r}"
    return found[0].commands()


def _env(tmp_path: Path) -> dict[str, str]:
    """A scratch HOME; profiles are found in its ~/.config/snakemake, as on a fresh account."""
    inherited = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    return {
        **inherited,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
    }


def _install_test_sized_slurm_profile(config_home: Path) -> None:
    """`slurm` in the profile search path: the shipped profile, job sizes lowered."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    sizes = sized_profile(config_home / "test-sizes")
    profile.update(yaml.safe_load((sizes / "config.yaml").read_text()))
    profile[FAST_STATUS[0].lstrip("-")] = int(FAST_STATUS[1])
    dest = config_home / "snakemake" / "slurm"
    dest.mkdir(parents=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))


def _bash(command: str, work: Path, env: dict, timeout: float = 900):
    return subprocess.run(
        ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_rerun_of_a_failed_shard_by_target_as_shown(tmp_path):
    (command,) = _block_with(RERUN_TARGET)
    refuse = {"task3": True}
    with FakeOpenAI(
        fault_fn=lambda b: "context_length" if refuse["task3"] and is_task3(b) else None
    ) as server:
        work = scratch_checkout(tmp_path, server)
        env = _env(tmp_path)
        _install_test_sized_slurm_profile(tmp_path / "home" / ".config")
        # the sweep, on this machine: shard 3 fails (task 3's rollouts fail terminally)
        first = _bash("snakemake --cores all --configfile my-sweep.yaml", work, env)
        assert first.returncode != 0 and not (work / RERUN_TARGET).exists(), first.stderr[-3000:]
        refuse["task3"] = False
        before, since = last_job_id(), len(server.requests)
        r = _bash(command, work, env)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-4000:]
        asked = server.requests[since:]
    ids = submitted(out)
    assert list(ids.values()) == ["rollout"], out[-3000:]
    (job,) = [j for j in slurm_jobs(before) if j.job_id in ids]
    assert job.comment == "rule_rollout_wildcards_3_8" and job.state == "COMPLETED", job
    assert len(asked) == 1 and asked[0]["n"] == 2 and is_task3(asked[0]), asked
    assert pd.read_parquet(work / RERUN_TARGET)["status"].eq("ok").all()


def test_endpoint_recipe_keeps_runtime_and_memory(tmp_path):
    install, edit, run = _block_with("--name slurm-endpoint")
    with FakeOpenAI() as server:
        work = scratch_checkout(tmp_path, server)
        env = _env(tmp_path)
        for command in (install, edit):
            r = _bash(command, work, env, timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
        before = last_job_id()
        r = _bash(run.replace("snakemake ", "snakemake -n ", 1), work, env)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert last_job_id() == before  # a dry run submits nothing
    resources = dict(
        re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", r.stdout, flags=re.M)
    )
    rollout = dict(kv.split("=", 1) for kv in resources["rollout"].split(", "))
    merge = dict(kv.split("=", 1) for kv in resources["merge"].split(", "))
    assert rollout["gpu"] == "0" and rollout["runtime"] == "360", rollout
    assert rollout["mem_mb"] == "64000" and merge["mem_mb"] == "32000", (rollout, merge)
