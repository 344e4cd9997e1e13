"""Helpers for the L3 Slurm tests: the local cluster (scripts/local-slurm.sh), the shipped profile
with test-size overrides, and what Slurm recorded about a run's jobs (squeue / scontrol; the
local cluster has no accounting database, so no sacct)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm"
# only sizes change for the tests: the 2-CPU CI machine cannot give 16 CPUs / 64 GB to a job
TEST_MEM_MB = 500
TEST_CPUS = 1
# The plugin checks status first after this many seconds, then waits 10 s longer after each check
# that finds no job finished (back to this value when one has). Most test jobs take 4-8 s, so 3 s
# checked too early and then waited 13 s; 8 s finds them at the first check. Measured on
# test_slurm_run_matches_local_run: 3 s -> 92 s, 5 s -> 104-118 s, 8 s -> 56-83 s, 10-12 s ->
# 75-83 s. The shipped profile keeps 40 s. (squeue forgets a finished job after MinJobAge, 3600 s
# on the local cluster: scripts/local-slurm.sh.)
FAST_STATUS = ["--slurm-init-seconds-before-status-checks", "8"]


def slurm_available() -> tuple[bool, str]:
    """The local cluster answers and its node takes jobs."""
    if not shutil.which("sbatch"):
        return False, "no Slurm client (sbatch); run scripts/local-slurm.sh start as root"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
        state = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=20
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"Slurm does not answer: {exc}"
    if "UP" not in ping.stdout:
        return False, "slurmctld does not answer; run scripts/local-slurm.sh start as root"
    if not any(s.rstrip("*") in ("idle", "mixed", "allocated", "completing") for s in state):
        return False, f"no usable Slurm node (states {state})"
    return True, ""


def sized_profile(dest: Path) -> Path:
    """A profile layered after profiles/slurm that changes only job sizes (mem, CPUs).

    Snakemake replaces a profile key as a whole, so the shipped resource tables are copied and
    only mem_mb/cpus_per_task are lowered; GPUs, runtimes (attempt-scaled), status command,
    retries etc. stay as shipped."""
    shipped = yaml.safe_load((PROFILE / "config.yaml").read_text())

    def sized(res: dict) -> dict:
        out = dict(res)
        if "mem_mb" in out:
            out["mem_mb"] = TEST_MEM_MB
        if "cpus_per_task" in out:
            out["cpus_per_task"] = TEST_CPUS
        return out

    prof = {
        "default-resources": sized(shipped["default-resources"]),
        "set-resources": {rule: sized(res) for rule, res in shipped["set-resources"].items()},
    }
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
    return dest


def profile_args(tmp_path: Path) -> list[str]:
    sizes = sized_profile(tmp_path / "test-sizes")
    return ["--profile", str(PROFILE), "--profile", str(sizes), *FAST_STATUS]


@dataclass
class SlurmJob:
    job_id: int
    name: str
    comment: str
    state: str
    time_limit: str

    @property
    def rule(self) -> str:
        """The plugin's --comment is rule_<rule>[_wildcards_<values>]."""
        m = re.match(r"rule_(.+?)(?:_wildcards_.*)?$", self.comment or "")
        return m.group(1) if m else ""

    def detail(self) -> dict[str, str]:
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", str(self.job_id)],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def slurm_jobs(after: int = 0) -> list[SlurmJob]:
    """Jobs slurmctld still knows (finished ones for MinJobAge = 300 s), ids > after."""
    out = subprocess.run(
        ["squeue", "-h", "--states=all", "-o", "%i|%j|%k|%T|%l"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    jobs = []
    for line in out.splitlines():
        jid, name, comment, state, limit = line.split("|", 4)
        if "_" in jid or not jid.isdigit():
            continue
        if int(jid) > after:
            jobs.append(SlurmJob(int(jid), name, comment, state, limit))
    return sorted(jobs, key=lambda j: j.job_id)


def last_job_id() -> int:
    jobs = slurm_jobs()
    return jobs[-1].job_id if jobs else 0


def submitted(output: str) -> dict[int, str]:
    """Slurm job id -> rule, from Snakemake's 'submitted with SLURM jobid' lines."""
    found = re.findall(
        r"submitted with SLURM jobid (\d+) \(log: \S*?/rule_([A-Za-z0-9_]+)/", output
    )
    return {int(j): rule for j, rule in found}


def scheduled_rules(output: str) -> tuple[set[str], set[str]]:
    """(rules Snakemake sent to the cluster, rules it ran locally) from its job headers."""
    remote = set(re.findall(r"^rule (\w+):", output, flags=re.M))
    local = set(re.findall(r"^localrule (\w+):", output, flags=re.M))
    return remote, local


def journal_writers(rollouts_path: Path) -> dict[tuple[int, int], str]:
    import pandas as pd

    df = pd.read_parquet(rollouts_path, columns=["task_index", "rollout_index", "writer"])
    return {
        (int(t), int(r)): w
        for t, r, w in zip(df["task_index"], df["rollout_index"], df["writer"], strict=True)
    }


def dump(obj) -> str:
    return json.dumps(obj, indent=1, default=str)[:3000]


def python() -> str:
    return sys.executable
