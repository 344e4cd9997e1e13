"""L3 (local): adaptive bayes warm-started from an earlier checkpoint's profile, through the
real Snakefile against a scripted endpoint (outcome per rollout a fixed function of (prompt,
seed)). The earlier checkpoint is profiled at fixed K; the new one moved a little (some tasks
that passed about a quarter of the time now pass about half of it). On the new checkpoint, bayes
with `adaptive.warm_start` matches every task, fits the drift, samples fewer rollouts than bayes
without it (324 against 404 of fixed K's 480 when written), and keeps what fixed K keeps
(>= 98 %). The warm start's saving at 1,000 tasks is simulated in benchmarks/bench_adaptive.py
--warm-start."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import WITHOUT_REPORT, endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow
TASKS, K = 60, 8


def _task(prompt: str) -> int:
    m = re.search(r"What is (\d+) \+ 1\?", prompt)
    return int(m.group(1)) if m else 0


def _byte(seed: int | None) -> int:
    return hashlib.sha256(str(seed).encode()).digest()[0]


def earlier_checkpoint(prompt: str, seed: int | None) -> str:
    """Task i: never right (i % 3 == 0), always right (i % 3 == 1), else about a quarter."""
    i = _task(prompt)
    right = i % 3 == 1 or (i % 3 == 2 and _byte(seed) < 64)
    return f"It is \\boxed{{{i + 1 if right else i + 7}}}."


def new_checkpoint(prompt: str, seed: int | None) -> str:
    """The earlier checkpoint, except that tasks i % 9 == 2 are now right about half the time."""
    i = _task(prompt)
    lucky = _byte(seed) < (128 if i % 9 == 2 else 64)
    right = i % 3 == 1 or (i % 3 == 2 and lucky)
    return f"It is \\boxed{{{i + 1 if right else i + 7}}}."


def _run(root: Path, answer, adaptive: dict) -> int:
    """The workflow in `root` (rollouts requested); its profile in results/t/profile/."""
    rows = [math_row(f"What is {i} + 1?", str(i + 1)) for i in range(TASKS)]
    write_jsonl(root / "data/m.jsonl", rows)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    with FakeOpenAI(answer) as server:
        cfg = endpoint_config(server.base_url, entries, adaptive=adaptive)
        r = snakemake(root, *WITHOUT_REPORT, "--configfile", str(write_config(root, cfg)))
        assert r.returncode == 0, r.stdout[-4000:]
        return server.stats["ok_choices"]


def _kept(root: Path) -> set[int]:
    report = json.loads((root / "results/t/export/report.json").read_text())
    dropped = {t for tasks in report["dropped_tasks"].values() for t in tasks}
    return set(range(TASKS)) - dropped


def test_a_warm_started_run_samples_fewer_rollouts_and_keeps_what_fixed_k_keeps(tmp_path):
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    _run(earlier, earlier_checkpoint, {"mode": "off"})
    runs = {}
    # a small audit sample (the default audits at least 30 tasks per label: half of these)
    bayes = {"mode": "bayes", "audit_min_tasks": 0}
    for name, adaptive in (
        ("fixed", {"mode": "off"}),
        ("bayes", bayes),
        ("warm", {**bayes, "warm_start": "earlier/tasks.parquet"}),
    ):
        root = tmp_path / name
        (root / "earlier").mkdir(parents=True)
        shutil.copy(earlier / "results/t/profile/tasks.parquet", root / "earlier/tasks.parquet")
        runs[name] = root, _run(root, new_checkpoint, adaptive)
    sent = {name: n for name, (_, n) in runs.items()}
    kept = {name: _kept(root) for name, (root, _) in runs.items()}
    print(f"rollouts sent: {sent}")
    assert sent["fixed"] == TASKS * K
    assert sent["warm"] < sent["bayes"] < sent["fixed"], sent
    for name in ("bayes", "warm"):
        assert (TASKS - len(kept[name] ^ kept["fixed"])) / TASKS >= 0.98, name
    prior = json.loads((runs["warm"][0] / "results/t/adaptive/prior.json").read_text())
    warm = prior["warm_start"]
    assert warm["matched"] == warm["earlier_tasks"] == TASKS
    assert warm["drift"]["tasks"] == TASKS
    assert prior["min_rollouts"] == 4  # the first round, with a warm start or without
    assert "warm_start" not in json.loads(
        (runs["bayes"][0] / "results/t/adaptive/prior.json").read_text()
    )
