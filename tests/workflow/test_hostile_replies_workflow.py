"""L3: replies crafted to break a shard, through the real Snakefile. Each hostile reply ends as
a typed failure of its task's rollouts (`engine_error` naming what was wrong), every shard
finishes, no journal file is left that a later run cannot read, and a rerun against a healthy
server fills exactly the failed rollouts."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from harness import shardkit as kit
from helpers import endpoint_config, snakemake, write_config

from rewardprof.manifest.load import validate_config
from rewardprof.store.journal import scan_journal
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow

K = 2
# task i of the source gets fault FAULTS[i] on every attempt -> the start of its rollouts' error
FAULTS = {
    "content_list": "invalid reply: choices[0].message.content is list, not a string",
    "content_dict": "invalid reply: choices[0].message.content is dict, not a string",
    "finish_reason_int": "invalid reply: choices[0].finish_reason is int, not a string",
    "usage_str": "invalid reply: usage is str, not an object",
    "not_utf8": "invalid reply: body is not UTF-8",
    "not_utf8_500": "HTTP 500: <html>",
    "deep_json": "invalid reply: body JSON is nested too deep",
    "surrogate": "invalid reply: choices[0].message.content is not valid Unicode",
}
HEALTHY = 2  # tasks after the hostile ones, served normally


def test_hostile_replies_fail_their_rollouts_and_a_rerun_fills_them(tmp_path):
    hostile = {kit.question(i): fault for i, fault in enumerate(FAULTS)}
    kit.write_source(tmp_path / "data/m.jsonl", len(FAULTS) + HEALTHY)

    def fault_for(body: dict) -> str | None:
        prompt = json.dumps(body["messages"])
        return next((f for q, f in hostile.items() if q in prompt), None)

    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    with FakeOpenAI(kit.answer, fault_fn=fault_for) as server:
        config = write_config(
            tmp_path,
            endpoint_config(
                server.base_url,
                entries,
                rollout={"max_attempts": 2, "max_failed_fraction": 1.0},
            ),
        )
        r = snakemake(tmp_path, "--configfile", str(config))
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        assert "Traceback" not in r.stdout + r.stderr
        for fault in FAULTS:
            assert server.stats[f"fault:{fault}"] == 2, fault  # both attempts, then given up
        rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
        tasks = kit.load_tasks(tmp_path / "results/t/materialize/tasks.parquet")
        question = tasks.set_index("task_index")["row"].map(lambda r: json.loads(r)["question"])
        rollouts["fault"] = rollouts["task_index"].map(question).map(hostile)
        failed = rollouts[rollouts["fault"].notna()]
        assert len(failed) == K * len(FAULTS)
        assert failed["status"].eq("engine_error").all()
        assert failed["reward"].isna().all() and failed["completion"].isna().all()
        for rec in failed.itertuples():
            assert rec.error.startswith(FAULTS[rec.fault]), (rec.fault, rec.error)
        assert rollouts.loc[rollouts["fault"].isna(), "status"].eq("ok").all()
        profile = pd.read_parquet(tmp_path / "results/t/profile/tasks.parquet")
        assert profile["num_failed/engine_error"].tolist() == [K] * len(FAULTS) + [0] * HEALTHY
        # every journal file reads whole: nothing to quarantine, nothing a rerun trips on
        scan = scan_journal(tmp_path / "results/t/rollouts/journal")
        assert scan.quarantined == 0 and scan.bad_files == 0 and scan.torn_lines == 0
        assert scan.keys.num_rows == K * (len(FAULTS) + HEALTHY)

        # the server heals; the rerun asks only for the failed rollouts and fills them
        server.fault_fn = None
        before = len(server.requests)
        r = snakemake(tmp_path, "--forcerun", "rollout", "--configfile", str(config))
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        asked = sorted(kit.request_pairs(server.requests[before:]))
        assert sorted({q for q, _ in asked}) == sorted(hostile)
        assert len(asked) == K * len(FAULTS)
    rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
    assert rollouts["status"].eq("ok").all() and len(rollouts) == K * (len(FAULTS) + HEALTHY)
    cfg = validate_config(yaml.safe_load(config.read_text()))
    assert kit.check_records(rollouts, tasks, cfg) == []
