"""L3: replies crafted to break a shard, through the real Snakefile. Each hostile reply ends as
a typed failure of its task's rollouts (`engine_error` naming what was wrong), every shard
finishes, no journal file is left that a later run cannot read, and a rerun against a healthy
server fills exactly the failed rollouts."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from harness import shardkit as kit
from helpers import WITHOUT_EXPORT, endpoint_config, snakemake, write_config

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
        r = snakemake(tmp_path, *WITHOUT_EXPORT, "--configfile", str(config))
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
        r = snakemake(
            tmp_path, *WITHOUT_EXPORT, "--forcerun", "rollout", "--configfile", str(config)
        )
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        asked = sorted(kit.request_pairs(server.requests[before:]))
        assert sorted({q for q, _ in asked}) == sorted(hostile)
        assert len(asked) == K * len(FAULTS)
    rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
    assert rollouts["status"].eq("ok").all() and len(rollouts) == K * (len(FAULTS) + HEALTHY)
    cfg = validate_config(yaml.safe_load(config.read_text()))
    assert kit.check_records(rollouts, tasks, cfg) == []


# replies too large to hold: each must end as reply_too_large, read only up to its bound
OVERSIZED = ("gzip_bomb", "endless", "huge_completion")
RSS_LIMIT_MB = 500


def _snakemake_max_rss(tmp_path, *args: str) -> tuple[int, str, int]:
    """Run the real Snakefile; (exit code, output, the largest RSS in KiB that Snakemake or
    any process it waited for reached: wait4's ru_maxrss covers every waited-for
    descendant, so the rollout job's peak is at most this)."""
    import os
    import subprocess

    from helpers import _snakemake_call

    cmd, env = _snakemake_call(tmp_path, args, None)
    log = tmp_path / f"snakemake-{len(list(tmp_path.glob('snakemake-*.log')))}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=out)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, log.read_text(), usage.ru_maxrss


def test_oversized_replies_stay_bounded_and_a_damaged_segment_is_regenerated(tmp_path):
    hostile = {kit.question(i): fault for i, fault in enumerate(OVERSIZED)}
    kit.write_source(tmp_path / "data/m.jsonl", len(OVERSIZED) + HEALTHY)

    def fault_for(body: dict) -> str | None:
        prompt = json.dumps(body["messages"])
        return next((f for q, f in hostile.items() if q in prompt), None)

    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}]
    with FakeOpenAI(kit.answer, fault_fn=fault_for) as server:
        cfg = endpoint_config(
            server.base_url,
            entries,
            num_shards=1,
            sampling={"max_tokens": 64},
            rollout={"max_attempts": 2, "max_failed_fraction": 1.0},
        )
        config = write_config(tmp_path, cfg)
        code, out, max_rss_kb = _snakemake_max_rss(tmp_path, "--configfile", str(config))
        assert code == 0, out[-4000:]
        assert "Traceback" not in out
        # the client is the rollout job: its own peak, as it wrote it when done
        status = json.loads((tmp_path / "results/t/rollouts/status/0-of-1.json").read_text())
        print(
            f"oversized replies: the rollout client's peak RSS {status['peak_rss_mb']:.0f} MB; "
            f"the largest of snakemake and all its jobs {max_rss_kb / 1024:.0f} MB"
        )
        assert 0 < status["peak_rss_mb"] < RSS_LIMIT_MB, status
        for fault in OVERSIZED:
            assert server.stats[f"fault:{fault}"] == 2, fault  # both attempts, then given up
        rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
        tasks = kit.load_tasks(tmp_path / "results/t/materialize/tasks.parquet")
        question = tasks.set_index("task_index")["row"].map(lambda r: json.loads(r)["question"])
        failed = rollouts[rollouts["task_index"].map(question).isin(hostile)]
        assert len(failed) == K * len(OVERSIZED)
        assert failed["status"].eq("engine_error").all()
        assert failed["error"].str.startswith("reply_too_large: body over ").all()
        assert failed["completion"].isna().all()
        assert rollouts.loc[~rollouts.index.isin(failed.index), "status"].eq("ok").all()

        # the server heals: the rerun completes every pair
        server.fault_fn = None
        r = snakemake(
            tmp_path, *WITHOUT_EXPORT, "--forcerun", "rollout", "--configfile", str(config)
        )
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
        assert rollouts["status"].eq("ok").all() and len(rollouts) == K * (len(tasks))

        # a journal segment damaged by hand: quarantined with one line naming it, and the
        # rollouts it held are generated again (and only those)
        journal = tmp_path / "results/t/rollouts/journal"
        segment = max(journal.glob("*.parquet"), key=lambda p: pq.read_metadata(p).num_rows)
        lost = pq.read_table(segment, columns=["task_index", "seed", "status"]).to_pandas()
        lost = lost[lost["status"] == "ok"]  # its failed records were superseded by the rerun
        lost_pairs = sorted(zip(lost["task_index"].map(question), lost["seed"], strict=True))
        assert lost_pairs
        segment.write_bytes(segment.read_bytes()[: segment.stat().st_size // 2])
        before = len(server.requests)
        r = snakemake(
            tmp_path, *WITHOUT_EXPORT, "--forcerun", "rollout", "--configfile", str(config)
        )
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        assert sorted(kit.request_pairs(server.requests[before:])) == lost_pairs
    assert (journal / "quarantine" / segment.name).exists() and not segment.exists()
    # a rollout job's log is a link to its attempts file (core/attempt_log.py): one file
    logs = [
        p for p in (tmp_path / "results/t/logs").rglob("*") if p.is_file() and not p.is_symlink()
    ]
    lines = [ln for p in logs for ln in p.read_text().splitlines()]
    named = [ln for ln in lines if segment.name in ln and "not a readable Parquet file" in ln]
    assert len(named) == 1, lines[-20:]
    rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
    assert rollouts["status"].eq("ok").all() and len(rollouts) == K * len(tasks)
    assert scan_journal(journal).bad_files == 0  # nothing left that a later run trips on
