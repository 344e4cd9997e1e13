"""L3 (local): adaptive sampling through the real Snakefile against a scripted endpoint whose
outcome per rollout is a fixed function of (prompt, seed): off, exact and bayes on the same
tasks keep the same tasks (bayes: >= 98 %) with fewer rollouts sent, and bayes over 1 and 3
shards samples the same (task, rollout) pairs. (SIGKILL + rerun of an adaptive shard job:
tests/faults/test_adaptive_stage.py.)"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.testing.fake_server import FakeOpenAI

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


def _run(root: Path, mode: str, num_shards: int = 2) -> int:
    """The workflow in `root` with adaptive.mode `mode`: rollouts requested."""
    rows = [math_row(f"What is {i} + 1?", str(i + 1)) for i in range(TASKS)]
    write_jsonl(root / "data/m.jsonl", rows)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    with FakeOpenAI(answer) as server:
        cfg = endpoint_config(
            server.base_url, entries, num_shards=num_shards, adaptive={"mode": mode}
        )
        r = snakemake(root, "--configfile", str(write_config(root, cfg)))
        assert r.returncode == 0, r.stderr[-4000:]
        return server.stats["ok_choices"]


def _kept(root: Path) -> set[int]:
    report = json.loads((root / "results/t/export/report.json").read_text())
    dropped = {t for tasks in report["dropped_tasks"].values() for t in tasks}
    return set(range(TASKS)) - dropped


def _pairs(root: Path) -> set[tuple[int, int]]:
    t = pq.read_table(root / "results/t/rollouts.parquet", columns=["task_index", "rollout_index"])
    return set(zip(t["task_index"].to_pylist(), t["rollout_index"].to_pylist(), strict=True))


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
