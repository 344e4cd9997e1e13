"""L3 (local): `rewardprof status` during bayes' first round, through the real Snakefile. The
first-round jobs are their own Snakemake jobs before the prior; status used to show them as
`not running`, 0.00 rollouts/s, no ETA, while they produced rollouts. Now each shard reads
`first_round` with its first round's done/expected, a rate and an ETA, and the run counts
them as running; once the round is journaled the shard reads `first_round_done` until its
rounds start. The fake engine's gate holds the answers after a few, so the look lands while
the first round runs (by construction)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    WITHOUT_REPORT,
    endpoint_config,
    math_row,
    popen_snakemake,
    wait_for,
    write_config,
    write_jsonl,
)

from rewardprof.store.layout import RunLayout
from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.tools.status import collect

pytestmark = pytest.mark.workflow
TASKS, K, FIRST = 24, 8, 4


def _answer(prompt: str, seed: int | None) -> str:
    return "It is \\boxed{2}." if (seed or 0) % 3 else "It is \\boxed{7}."


def test_status_sees_the_first_round_with_its_rate_and_eta(tmp_path):
    rows = [math_row(f"What is 1 + 1? ({i})", "2") for i in range(TASKS)]
    write_jsonl(tmp_path / "data/m.jsonl", rows)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    layout = RunLayout(tmp_path / "results" / "t", 2)
    # each request takes 0.3 s and each job sends one at a time, so the heartbeats (every
    # 0.2 s) see the count rise before the gate holds the rest: a rate by construction
    with FakeOpenAI(_answer, latency_s=0.3) as server:
        cfg = endpoint_config(
            server.base_url,
            entries,
            adaptive={"mode": "bayes", "min_rollouts": FIRST, "audit_min_tasks": 0},
            rollout={"progress_interval_s": 0.2, "concurrency": 1},
        )
        server.hold_after(8)  # 8 requests answered (n=4 each), the rest wait
        run = popen_snakemake(
            tmp_path, *WITHOUT_REPORT, "--configfile", str(write_config(tmp_path, cfg))
        )
        try:
            wait_for(lambda: server.gate_held >= 2, "both first-round jobs held at the gate")
            wait_for(
                lambda: all(s["state"] == "first_round" for s in collect(layout.root)["shards"]),
                "both shards in their first round",
            )
            st = collect(layout.root)
            first_round = (TASKS // 2) * FIRST
            # the 8 answers went to one shard or both: whichever got some shows a rate and ETA
            served = [s for s in st["shards"] if s["done"] > 0]
            assert served, st["shards"]
            for s in st["shards"]:
                assert s["expected"] == first_round and s["done"] < first_round, s
            for s in served:
                assert s["rollouts_per_s"] > 0 and s["eta"] not in (None, "-", "?"), s
            assert st["running"] == 2 and st["eta"] is not None
            text = subprocess.run(
                [sys.executable, "-m", "rewardprof.cli", "status", str(layout.root)],
                capture_output=True,
                text=True,
                timeout=120,
            ).stdout
            assert re.search(r"^0-of-2 +first_round ", text, re.M), text
            assert "not running" not in text and "2 running" in text, text
        finally:
            server.hold_after(None)
        out, _ = run.communicate(timeout=600)
        assert run.returncode == 0, out[-4000:]
    st = collect(layout.root)
    assert [s["state"] for s in st["shards"]] == ["done", "done"]
    assert Path(layout.shard_log("first_round", 0, 2)).read_text().count("attempt started") == 1
