"""L3 (local): the README's "Rerun one shard", on a shard that finished with a terminal failure
under `rollout.max_failed_fraction`: removing its output and rerunning it by target retries the
failure, and the last step (the plain run) brings the retried rollout into the merged table,
the profile and the export. Snakemake reruns merge because the shard's file changed (it skips
a shard file rewritten with the same bytes: input checksums are recorded)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import WITHOUT_REPORT, endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.store.layout import RunLayout
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow
TASKS, K = 12, 2


def test_a_retried_failure_reaches_the_merged_table_profile_and_export(tmp_path):
    write_jsonl(
        tmp_path / "data/m.jsonl", [math_row(f"What is {i} + 1?", str(i + 1)) for i in range(TASKS)]
    )
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    refuse = {"on": True}

    def fault(body: dict) -> str | None:  # task 3's prompt: a terminal failure while refused
        text = json.dumps(body["messages"])
        return "context_length" if refuse["on"] and "What is 3 + 1?" in text else None

    layout = RunLayout(tmp_path / "results" / "t", 2)
    with FakeOpenAI(lambda p, s: "It is \\boxed{4}.", fault_fn=fault) as server:
        cfg = endpoint_config(
            server.base_url, entries, num_shards=2, rollout={"max_failed_fraction": 0.5}
        )
        config = write_config(tmp_path, cfg)
        first = snakemake(tmp_path, *WITHOUT_REPORT, "--configfile", str(config))
        assert first.returncode == 0, first.stderr[-3000:]
        merged = pd.read_parquet(layout.rollouts)
        assert (merged["status"] == "context_length").sum() == K  # task 3 failed, shard done
        shard = layout.shard_rollouts(3 % 2, 2)
        refuse["on"] = False
        shard.unlink()  # the README's `rm -f`, then the rerun by target
        target = str(shard.relative_to(tmp_path))
        rerun = snakemake(tmp_path, *WITHOUT_REPORT, f"--configfile={config}", target)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        last = snakemake(tmp_path, *WITHOUT_REPORT, "--configfile", str(config))
        assert last.returncode == 0, last.stderr[-3000:]
        merged = pd.read_parquet(layout.rollouts)
        # a rerun that changes nothing: the shard rewritten with the same bytes, nothing runs
        shard.unlink()
        snakemake(tmp_path, *WITHOUT_REPORT, f"--configfile={config}", target)
        again = snakemake(tmp_path, *WITHOUT_REPORT, "--configfile", str(config))
    assert "Nothing to be done" not in last.stderr
    assert merged["status"].eq("ok").all() and len(merged) == TASKS * K
    profile = pd.read_parquet(layout.profile_tasks).set_index("task_index")
    assert profile.loc[3, "num_failed"] == 0 and profile.loc[3, "num_rollouts"] == K
    export = json.loads(layout.export_report.read_text())
    assert 3 not in export["dropped_tasks"]["no_rollouts"]
    assert "Nothing to be done" in again.stderr, again.stderr[-2000:]
