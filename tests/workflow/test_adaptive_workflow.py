"""L3 (local): adaptive sampling through the real Snakefile against a scripted endpoint whose
outcome per rollout is a fixed function of (prompt, seed): off, exact and bayes on the same
tasks keep the same tasks (bayes: >= 98 %) with fewer rollouts sent, and bayes over 1 and 3
shards samples the same (task, rollout) pairs, and so does a bayes run whose jobs are killed
with SIGKILL in its first round and in its adaptive rounds, then rerun: the pairs and decisions
of the round-synchronous planner on the same rewards, though each task's rounds are planned as
soon as its own last round returned. (The same at the rollout command's level:
tests/faults/test_adaptive_stage.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from harness.rounds import same_plans, shards_round_synchronous
from helpers import (
    REPO,
    WITHOUT_REPORT,
    endpoint_config,
    math_row,
    snakemake,
    wait_for,
    write_config,
    write_jsonl,
)

from rewardprof.manifest.load import load_overlaid
from rewardprof.store.plans import read_plans
from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.tools.status import collect, format_status

pytestmark = pytest.mark.workflow
TASKS, K = 45, 8


def answer(prompt: str, seed: int | None) -> str:
    """Task i (asks "What is i + 1?"): never right (i % 3 == 0), always right (i % 3 == 1),
    else right for about a quarter of the seeds."""
    m = re.search(r"What is (\d+) \+ 1\?", prompt)
    i = int(m.group(1)) if m else 0
    lucky = hashlib.sha256(str(seed).encode()).digest()[0] < 64
    right = i % 3 == 1 or (i % 3 == 2 and lucky)
    return f"It is \\boxed{{{i + 1 if right else i + 7}}}."


def _config(root: Path, base_url: str, mode: str, num_shards: int) -> Path:
    rows = [math_row(f"What is {i} + 1?", str(i + 1)) for i in range(TASKS)]
    write_jsonl(root / "data/m.jsonl", rows)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    cfg = endpoint_config(base_url, entries, num_shards=num_shards, adaptive={"mode": mode})
    return write_config(root, cfg)


def _run(root: Path, mode: str, num_shards: int = 2) -> int:
    """The workflow in `root` with adaptive.mode `mode`: rollouts requested."""
    with FakeOpenAI(answer) as server:
        cfg = _config(root, server.base_url, mode, num_shards)
        r = snakemake(root, *WITHOUT_REPORT, "--configfile", str(cfg))
        assert r.returncode == 0, r.stderr[-4000:]
        return server.stats["ok_choices"]


def _kept(root: Path) -> set[int]:
    report = json.loads((root / "results/t/export/report.json").read_text())
    dropped = {t for tasks in report["dropped_tasks"].values() for t in tasks}
    return set(range(TASKS)) - dropped


def _pairs(root: Path) -> set[tuple[int, int]]:
    t = pq.read_table(root / "results/t/rollouts.parquet", columns=["task_index", "rollout_index"])
    return set(zip(t["task_index"].to_pylist(), t["rollout_index"].to_pylist(), strict=True))


def _round_synchronous(root: Path, fixed: Path, num_shards: int):
    """The round-synchronous planner on the run in `root`: its shards' tasks, its prior, and
    the rewards of the fixed-K run in `fixed` (the same (prompt, seed), the same reward)."""
    cfg = load_overlaid(REPO / "config/config.yaml", [root / "run.yaml"])
    shards = [root / f"results/t/shards/{i}-of-{num_shards}.parquet" for i in range(num_shards)]
    columns = ["task_index", "rollout_index", "reward"]
    rewards = pq.read_table(fixed / "results/t/rollouts.parquet", columns=columns).to_pandas()
    prior = root / "results/t/adaptive/prior.json"
    return shards_round_synchronous(cfg, shards, rewards, prior)


def _plans(root: Path):
    return read_plans(sorted((root / "results/t/rollouts.parquet").rglob("*.parquet")))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, int]]:
    """One workflow run per (mode, num_shards), shared by the tests (runs are the cost)."""
    out = {}
    for mode, shards in (("off", 1), ("exact", 1), ("bayes", 1), ("bayes", 3)):
        root = tmp_path_factory.mktemp(f"{mode}{shards}")
        out[f"{mode}{shards}"] = root, _run(root, mode, shards)
    return out


def test_off_exact_bayes_keep_the_same_tasks_with_fewer_rollouts(runs):
    sent = {mode: runs[f"{mode}1"][1] for mode in ("off", "exact", "bayes")}
    kept = {mode: _kept(runs[f"{mode}1"][0]) for mode in sent}
    assert sent["off"] == TASKS * K and sent["exact"] < sent["off"]
    assert sent["bayes"] < sent["off"]
    assert kept["exact"] == kept["off"]
    same = TASKS - len(kept["bayes"] ^ kept["off"])
    assert same / TASKS >= 0.98
    # the rollouts each adaptive run has are the fixed run's (same seeds), and its profile
    # says which tasks stopped early; the completeness checks count those as complete
    for mode in ("exact", "bayes"):
        root = runs[f"{mode}1"][0]
        assert _pairs(root) < _pairs(runs["off1"][0])
        prof = pq.read_table(root / "results/t/profile/tasks.parquet").to_pandas()
        assert prof["stopped_early"].any() and (prof["missing_num_rollouts"] == 0).all()
        assert (prof["num_rollouts"] == prof["expected_num_rollouts"]).all()
        merge = json.loads((root / "results/t/merge_report.json").read_text())
        assert merge["adaptive"]["tasks_stopped_early"] == int(prof["stopped_early"].sum())
        check = subprocess.run(
            [str(Path(sys.executable).parent / "rewardprof"), "check", str(root / "results/t")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert check.returncode == 0, check.stdout
    prior = json.loads((runs["bayes1"][0] / "results/t/adaptive/prior.json").read_text())
    assert set(prior["labels"]) == {"m"} and prior["min_rollouts"] == 4


def test_bayes_samples_the_same_pairs_with_one_or_three_shards(runs):
    one, three = runs["bayes1"][0], runs["bayes3"][0]
    assert _pairs(one) == _pairs(three)
    assert _kept(one) == _kept(three)


def test_rounds_planned_task_by_task_sample_the_round_by_round_pairs(runs):
    """The rollout jobs plan a task's next round when its last one returned (no barrier). On
    the same rewards (the fixed-K run's: same seeds, same scripted answers) the round-by-round
    planner, replayed here shard by shard with the run's own priors, asks for exactly the pairs
    each bayes run sampled, with 1 and with 3 shards, and plans and decides the same."""
    for key, shards in (("bayes1", 1), ("bayes3", 3)):
        root = runs[key][0]
        want_pairs, want_plans = _round_synchronous(root, runs["off1"][0], shards)
        assert _pairs(root) == want_pairs, key
        same_plans(_plans(root), want_plans)


def test_a_finished_adaptive_run_reads_done_in_status(runs):
    """Planned rollouts, not K per task: a finished run is done, never "516/624 (82.7 %)"."""
    for key in ("bayes1", "bayes3"):
        root, _ = runs[key]
        st = collect(root / "results/t")
        prof = pq.read_table(root / "results/t/profile/tasks.parquet").to_pandas()
        assert [s["state"] for s in st["shards"]] == ["done"] * len(st["shards"]), key
        assert st["done"] == st["expected"] == int(prof["num_rollouts"].sum()) < TASKS * K
        assert (st["max_expected"], st["stopped_early"]) == (
            TASKS * K,
            int(prof["stopped_early"].sum()),
        )
        assert st["eta_s"] in (None, 0)
        text = format_status(st)
        assert f"done: {st['done']}/{st['expected']} rollouts" in text, text
        assert f"stopped early {st['stopped_early']} tasks" in text, text


def _asked(requests: list[dict]) -> list[tuple[str, int]]:
    """(question, seed) of every sample the requests asked for (n samples: seed .. seed+n-1)."""
    out = []
    for body in requests:
        q = re.search(r"What is \d+ \+ 1\?", json.dumps(body["messages"])).group(0)
        out += [(q, body["seed"] + j) for j in range(int(body.get("n", 1)))]
    return out


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.NoSuchProcess:  # ended since it was listed: not the job, which waits
        return ""


def _kill_job_at_the_gate(root: Path, config: Path, server: FakeOpenAI, command: str) -> None:
    """Run the workflow until a request of the job `rewardprof <command>` waits at the
    server's gate (so the job cannot have finished), SIGKILL that job's processes, and let
    Snakemake end on the failed job."""
    controller = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(root)]
        + ["--cores", "2", "--configfile", str(config)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    wait_for(lambda: server.gate_held >= 1, f"a request of {command} to wait at the gate")
    jobs = [
        p
        for p in psutil.Process(controller.pid).children(recursive=True)
        if f"rewardprof {command} " in _cmdline(p)
    ]
    assert jobs, f"no {command} job runs while its request waits"
    for job in jobs:
        for proc in [job, *job.children(recursive=True)]:
            proc.send_signal(signal.SIGKILL)
    assert controller.wait(timeout=300) != 0  # Snakemake saw its job fail
    server.hold_after(None)


def test_bayes_run_killed_in_each_round_samples_the_same_pairs(runs, tmp_path):
    """SIGKILL of the first-round job, then of the rounds job after the prior was fitted; each
    time a rerun: the same (task, rollout) pairs, prior and decisions as the uninterrupted
    run, and no journaled rollout asked for twice."""
    reference = runs["bayes1"][0]
    prior = tmp_path / "results/t/adaptive/prior.json"
    with FakeOpenAI(answer) as server:
        config = _config(tmp_path, server.base_url, "bayes", 1)
        server.hold_after(10)  # the first round: 10 answers, then every request waits
        _kill_job_at_the_gate(tmp_path, config, server, "adaptive-first-round")
        assert not prior.exists()
        # the rerun fits the prior, then its rounds: 3 of their requests answered, then a wait
        server.hold_after(3, match=lambda body: prior.exists())
        _kill_job_at_the_gate(tmp_path, config, server, "rollout")
        assert prior.exists() and not (tmp_path / "results/t/rollouts.parquet").exists()
        r = snakemake(tmp_path, *WITHOUT_REPORT, "--configfile", str(config))
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        asked = _asked(server.requests)
    assert _pairs(tmp_path) == _pairs(reference)
    assert _kept(tmp_path) == _kept(reference)
    want_pairs, want_plans = _round_synchronous(tmp_path, runs["off1"][0], 1)
    assert _pairs(tmp_path) == want_pairs
    same_plans(_plans(tmp_path), want_plans)
    assert json.loads(prior.read_text()) == json.loads(
        (reference / "results/t/adaptive/prior.json").read_text()
    )
    # asked for again: at most the samples in flight at each kill (4 requests at a time)
    # (a rerun that ignored the journal would ask for the first round's 180 samples again)
    assert len(asked) - len(set(asked)) <= 2 * 4 * K
