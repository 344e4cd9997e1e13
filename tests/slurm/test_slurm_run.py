"""L3 on a real single-node Slurm (scripts/local-slurm.sh): `snakemake --profile profiles/slurm`
with test-size overrides only, against the scripted fake OpenAI-compatible server.

The local cluster has no slurmdbd, like the shipped profile's choice `slurm-status-command:
squeue` expects: a run that finishes here went through the squeue status path (the sacct path
never sees a job finish without accounting)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import endpoint_config, math_row, require_piece, snakemake, write_config, write_jsonl
from slurm_helpers import (
    PROFILE,
    REPO,
    last_job_id,
    profile_args,
    scheduled_rules,
    slurm_available,
    slurm_jobs,
    submitted,
)

from rewardprof.store.journal import scan_journal
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module", autouse=True)
def local_slurm():
    ok, why = slurm_available()
    require_piece("local Slurm cluster", ok, why)


def answer(prompt: str, seed: int | None) -> str:
    """Right for two seeds in three: rewards vary per rollout, reproducibly per seed."""
    m = re.search(r"What is (\d+) \+ (\d+)\?", prompt)
    right = int(m.group(1)) + int(m.group(2)) if m else 0
    return f"So \\boxed{{{right if (seed or 0) % 3 else right + 1}}}."


def _entries(tmp_path: Path, n: int) -> list[dict]:
    write_jsonl(
        tmp_path / "data" / "m.jsonl",
        [math_row(f"What is {i} + {i}?", str(2 * i)) for i in range(n)],
    )
    return [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 4}]


def _dag_counts(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)\s+(\d+)$", stdout, flags=re.M))


def test_dry_run_prints_dag_and_submits_nothing(tmp_path):
    """`snakemake -n --profile profiles/slurm`, then `--profile slurm` after the install step."""
    xdg = tmp_path / "xdg"
    env = {"XDG_CONFIG_HOME": str(xdg)}
    with FakeOpenAI() as server:
        work = tmp_path / "w"
        cfg = write_config(work, endpoint_config(server.base_url, _entries(work, 4)))
        before = last_job_id()
        r = snakemake(work, "-n", "--configfile", str(cfg), "--profile", str(PROFILE), env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        counts = _dag_counts(r.stdout)
        assert counts["rollout"] == "2" and counts["shard"] == "2", counts

        # bare name: not found until installed (Snakemake looks in cwd and config dirs only)
        r = snakemake(work, "-n", "--configfile", str(cfg), "--profile", "slurm", env=env)
        assert r.returncode != 0
        inst = subprocess.run(
            [sys.executable, "-m", "rewardprof.cli", "install-profile"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )
        assert inst.returncode == 0, inst.stdout + inst.stderr
        installed = xdg / "snakemake" / "slurm"
        assert installed.resolve() == PROFILE.resolve()  # a link: always the shipped profile
        r2 = snakemake(work, "-n", "--configfile", str(cfg), "--profile", "slurm", env=env)
        assert r2.returncode == 0, r2.stderr[-3000:]
        assert _dag_counts(r2.stdout) == counts
        assert "rollout" in r2.stdout and "gpu=1" in r2.stdout  # the profile's resources
        assert last_job_id() == before, "a dry run submitted a Slurm job"
        assert server.stats["requests"] == 0
    assert not (work / "results").exists()


def test_slurm_run_matches_local_run(tmp_path):
    with FakeOpenAI(answer) as server:
        runs = {}
        for where in ("local", "slurm"):
            work = tmp_path / where
            cfg = write_config(work, endpoint_config(server.base_url, _entries(work, 6)))
            args = ["--configfile", str(cfg)]
            if where == "slurm":
                before = last_job_id()
                args += profile_args(tmp_path)
            t0 = time.monotonic()
            r = snakemake(work, *args, timeout=600)
            runs[where] = (r, time.monotonic() - t0)
            assert r.returncode == 0, f"{where}: {r.stderr[-4000:]}"
    print({k: f"{v[1]:.0f}s" for k, v in runs.items()})
    out = runs["slurm"][0].stdout + runs["slurm"][0].stderr
    remote, local = scheduled_rules(out)
    assert {"materialize", "rollout"} <= remote, (remote, local)
    ids = submitted(out)
    jobs = {j.job_id: j for j in slurm_jobs(before)}
    # every rule not declared local ran as a Slurm job, and each job finished COMPLETED
    assert set(ids.values()) == remote - {"all"}, (ids, remote)
    for jid, rule in ids.items():
        assert jid in jobs, f"Slurm has no record of job {jid} ({rule})"
        assert jobs[jid].rule == rule and jobs[jid].state == "COMPLETED", jobs[jid]
    shards = sorted(j.comment for j in jobs.values() if j.rule == "rollout")
    assert shards == ["rule_rollout_wildcards_0_2", "rule_rollout_wildcards_1_2"]
    for j in jobs.values():
        if j.rule == "rollout":  # the shipped GPU request and attempt-1 runtime (360 min)
            d = j.detail()
            assert "gpu:1" in d.get("TresPerJob", ""), d
            assert d["TimeLimit"] == "06:00:00", d
    # sacct cannot see these jobs here (no accounting): the run used the squeue status path
    assert subprocess.run(["sacct", "-j", str(max(ids))], capture_output=True).returncode != 0

    # the same profile as the local run, row for row
    local = pd.read_parquet(tmp_path / "local/results/t/profile/tasks.parquet")
    slurm = pd.read_parquet(tmp_path / "slurm/results/t/profile/tasks.parquet")
    pd.testing.assert_frame_equal(local, slurm)
    assert 0 < local["mean/reward"].mean() < 1  # the comparison is not trivially all-0/all-1
    for name in ("summary.json",):
        a = json.loads((tmp_path / "local/results/t/profile" / name).read_text())
        b = json.loads((tmp_path / "slurm/results/t/profile" / name).read_text())
        assert a == b


def _ok_keys(journal: Path) -> set[tuple[int, int]]:
    if not journal.exists():
        return set()
    keys = scan_journal(journal).keys.to_pandas()
    keys = keys[keys["status"] == "ok"]
    return set(zip(keys["task_index"], keys["rollout_index"], strict=True))


def _canonical(messages: list[dict]) -> str:
    return json.dumps(messages, sort_keys=True)


def test_scancel_rollout_mid_shard_is_retried_without_regenerating(tmp_path):
    """scancel one shard's rollout job mid-shard: Snakemake reports the failed job, the
    profile's `retries` resubmits it (attempt 2, twice the runtime), the retry continues from
    the journal, and the merged output has every (task, rollout) exactly once."""
    n_tasks, k = 10, 4
    with FakeOpenAI(answer, latency_s=0.1) as server:
        cfg_dict = endpoint_config(
            server.base_url,
            _entries(tmp_path, n_tasks),
            rollout={"concurrency": 2, "segment_interval_s": 0.5},
        )
        cfg_dict["entries"][0]["num_repeats"] = k
        cfg_dict["engine"]["max_n"] = 1  # one request per rollout
        cfg = write_config(tmp_path, cfg_dict)
        # tasks and shards locally (covered on Slurm by the test above): this test is the kill
        r = snakemake(tmp_path, "--configfile", str(cfg), "--until", "shard")
        assert r.returncode == 0, r.stderr[-3000:]
        # shard 0's requests (its tasks' prompts) get 6 answers, then wait at the gate until its
        # job is cancelled: the scancel lands mid-shard by construction, however fast the
        # machine; shard 1 is served as usual
        shard0_prompts = {
            _canonical(json.loads(m))
            for m in pd.read_parquet(
                tmp_path / "results/t/shards/0-of-2.parquet", columns=["messages"]
            )["messages"]
        }
        server.hold_after(6, match=lambda body: _canonical(body["messages"]) in shard0_prompts)
        before = last_job_id()
        # up to the merged rollouts: the stages after merge add nothing to this test
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--cores",
            "2",
            "results/t/rollouts.parquet",
            "--configfile",
            str(cfg),
            *profile_args(tmp_path),
        ]
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        journal = tmp_path / "results/t/rollouts/journal"
        victim = None
        deadline = time.time() + 300  # liveness only
        while time.time() < deadline and victim is None:
            shard0 = [
                j
                for j in slurm_jobs(before)
                if j.comment == "rule_rollout_wildcards_0_2" and j.state == "RUNNING"
            ]
            done0 = {key for key in _ok_keys(journal) if key[0] % 2 == 0}
            # the 6 answered rollouts journaled and both concurrency slots held at the gate
            if shard0 and len(done0) >= 6 and server.gate_held == 2:
                victim = shard0[0]
            else:
                assert proc.poll() is None, proc.communicate()[0][-4000:]
                time.sleep(0.3)
        assert victim is not None, "shard 0's rollout job never reached the held answers"
        cancelled_at = time.time()
        subprocess.run(["scancel", str(victim.job_id)], check=True)
        # the held requests stay unanswered until Slurm has ended the job; then every answer is
        # served (the retry's too)
        deadline = time.time() + 60  # liveness only
        while time.time() < deadline and any(
            j.job_id == victim.job_id and j.state == "RUNNING" for j in slurm_jobs(before)
        ):
            time.sleep(0.3)
        server.hold_after(None)
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-4000:]
        requests = list(server.requests)

    # Snakemake saw the cancelled job as failed and resubmitted it
    assert f"SLURM-job '{victim.job_id}' failed" in out and "CANCELLED" in out, out[-4000:]
    jobs = slurm_jobs(before)
    retry = [
        j for j in jobs if j.comment == "rule_rollout_wildcards_0_2" and j.job_id > victim.job_id
    ]
    assert len(retry) == 1 and retry[0].state == "COMPLETED", jobs
    assert retry[0].time_limit == "12:00:00"  # runtime "360 * attempt", attempt 2

    rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
    keys = list(zip(rollouts["task_index"], rollouts["rollout_index"], strict=True))
    assert len(keys) == len(set(keys)) == n_tasks * k  # no duplicate, none missing
    assert rollouts["status"].eq("ok").all()
    # rollouts journaled by the cancelled job were requested once: never regenerated
    shard0 = rollouts[rollouts["task_index"] % 2 == 0]
    writers = shard0["writer"].value_counts()
    assert len(writers) == 2, writers  # the cancelled attempt's records + the retry's
    seeds = pd.Series([b["seed"] for b in requests]).value_counts()
    first = shard0[shard0["finished_at"] < cancelled_at]  # journaled by the cancelled job
    assert len(first) == 6  # the answers the gate let through, all journaled before the kill
    assert (seeds.reindex(first["seed"]).fillna(0) == 1).all()
    # every rollout was requested at least once; sent twice: at most the requests in flight at
    # the kill, i.e. the 2 held at the gate (concurrency 2, nothing answered-but-unjournaled
    # then), and only shard 0's (none if the dying job still journaled the released answers)
    assert (seeds.reindex(rollouts["seed"]).fillna(0) >= 1).all()
    assert len(requests) - n_tasks * k <= 2
    twice = set(seeds[seeds > 1].index)
    assert twice <= set(shard0["seed"]) - set(first["seed"]), twice
