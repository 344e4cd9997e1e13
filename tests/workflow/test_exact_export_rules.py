"""L3 (local): `exact` exports what fixed K exports when the export rules read counts and reward
values: `export.min_rollouts: 8` above where exact settles a task, and `min_grpo_signal` on a
partial-credit label (instruction following graded by the share of instructions followed), both
in one blend, through the real Snakefile, the real verifiers, profile and export. The scripted
endpoint's answer is a fixed function of (prompt, seed), so both runs see the same outcome for
every (task, rollout) they sample."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import WITHOUT_REPORT, endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow
MATH, IF, K = 30, 18, 16
EXPORT = {"min_rollouts": 8, "min_grpo_signal": 0.3}


def _luck(i: int, seed: int | None) -> int:
    return hashlib.sha256(f"{i}/{seed}".encode()).digest()[0]


def answer(prompt: str, seed: int | None) -> str:
    """Math task i: never right (i % 3 == 0), always (1), else for about a third of the seeds.
    Instruction task j follows none, one or both of its two instructions (no comma, all
    lowercase): none (j % 3 == 0), both (1), else by the seed, so its rewards take 0, 0.5, 1."""
    if m := re.search(r"What is (\d+) \+ 1\?", prompt):
        i = int(m.group(1))
        right = i % 3 == 1 or (i % 3 == 2 and _luck(i, seed) < 85)
        return f"It is \\boxed{{{i + 1 if right else i + 7}}}."
    j = int(re.search(r"Topic (\d+)", prompt).group(1))
    follows = {0: 0, 1: 2}.get(j % 3, _luck(j, seed) % 3)
    return ["Hello, World.", "hello, world.", "hello world."][follows]


def _blend(root: Path) -> list[dict]:
    write_jsonl(
        root / "data/m.jsonl", [math_row(f"What is {i} + 1?", str(i + 1)) for i in range(MATH)]
    )
    rows = [
        {
            "prompt": f"Topic {j}: write a greeting, in lowercase, without commas.",
            "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
            "kwargs": [{}, {}],
        }
        for j in range(IF)
    ]
    write_jsonl(root / "data/if.jsonl", rows)
    return [
        {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K},
        {
            "label": "if",
            "environment": "instruction_following",
            "source": "data/if.jsonl",
            "num_repeats": K,
            "options": {"grading_mode": "fraction"},
        },
    ]


def _run(root: Path, mode: str) -> int:
    with FakeOpenAI(answer) as server:
        cfg = endpoint_config(
            server.base_url, _blend(root), num_shards=2, adaptive={"mode": mode}, export=EXPORT
        )
        r = snakemake(root, *WITHOUT_REPORT, "--configfile", str(write_config(root, cfg)))
        assert r.returncode == 0, r.stderr[-4000:]
    # the run ends on its result: the one-screen summary is the last thing Snakemake printed
    tail = r.stderr.strip().splitlines()[-14:]
    report = json.loads((root / "results/t/export/report.json").read_text())
    kept = f"kept for training: {report['kept']} of {MATH + IF} tasks"
    assert any(line.startswith(kept) for line in tail), "\n".join(tail)
    assert any(line.startswith("if ") for line in tail)  # the per-label table
    return server.stats["ok_choices"]


def _exported(root: Path) -> dict[str, set[str]]:
    report = json.loads((root / "results/t/export/report.json").read_text())
    dropped = {reason: set(tasks) for reason, tasks in report["dropped_tasks"].items() if tasks}
    return {"kept": set(range(MATH + IF)) - set().union(*dropped.values()), **dropped}


def test_exact_exports_the_fixed_k_export_with_count_and_value_rules(tmp_path):
    fixed_root, exact_root = tmp_path / "off", tmp_path / "exact"
    sent = {"off": _run(fixed_root, "off"), "exact": _run(exact_root, "exact")}
    fixed, exact = _exported(fixed_root), _exported(exact_root)
    assert exact["kept"] == fixed["kept"]
    # what makes the case: tasks that settle early and yet are kept, and partial-credit tasks
    # of pass rate 0 kept for their reward-value signal
    assert {i for i in fixed["kept"] if i < MATH and i % 3 == 2}
    rollouts = pq.read_table(exact_root / "results/t/rollouts.parquet").to_pandas()
    partial = rollouts[rollouts["task_index"] >= MATH]
    assert set(partial["reward"].round(3)) == {0.0, 0.5, 1.0}
    # exact spent less on the 0/1 label; the partial-credit label is decided at K
    assert sent["exact"] < sent["off"] == (MATH + IF) * K
    assert (partial.groupby("task_index").size() == K).all()
