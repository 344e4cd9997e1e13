"""Replies crafted to break a shard (rewardprof.testing.hostile_replies): each is a typed,
retried `engine_error` naming what was wrong, never a crash and never a raw value in the
journal; the shard finishes, and a rerun against a healthy server fills the failed rollouts.
A journal tail that does not fit the schema (an older version's, or a damaged one) is
quarantined, not fatal for the next run."""

from __future__ import annotations

import json
import logging

import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit

from rewardprof.stages.rollout.shard_job import ShardJob, run_shard
from rewardprof.store.journal import QUARANTINE, scan_journal
from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.testing.hostile_replies import MANGLE, RAW, STREAMED

# fault -> what the failed rollouts' error says
REASONS = {
    "content_list": "invalid reply: choices[0].message.content is list, not a string",
    "content_dict": "invalid reply: choices[0].message.content is dict, not a string",
    "content_number": "invalid reply: choices[0].message.content is int, not a string",
    "finish_reason_int": "invalid reply: choices[0].finish_reason is int, not a string",
    "token_ids_str": "invalid reply: choices[0].token_ids is str, not a list",
    "surrogate": "invalid reply: choices[0].message.content is not valid Unicode",
    "usage_str": "invalid reply: usage is str, not an object",
    "usage_tokens_str": "invalid reply: usage.completion_tokens is str, not an integer",
    "tokens_huge": "invalid reply: usage.prompt_tokens is 1099511627776, outside [0, 1073741824]",
    "not_utf8": "invalid reply: body is not UTF-8 (byte 0xff at ",
    "not_utf8_500": "HTTP 500: <html><body>Erreur interne : le mandataire a \ufffdchou\ufffd",
    "deep_json": "invalid reply: body JSON is nested too deep",
    "huge_int": "invalid reply: malformed JSON in body (Exceeds the limit",
    "duplicate_index": "invalid reply: choices[2].index 0 repeats choices[0]",
    "finish_reason_huge": "invalid reply: choices[0].finish_reason 'stopstopstop",
    "usage_huge": "invalid reply: usage.completion_tokens is 1073741824, outside [0, ",
    "gzip_bomb": "reply_too_large: body over ",
    "endless": "reply_too_large: body over ",
    "huge_completion": "reply_too_large: body over ",
}
# accepted, normalized: "LENGTH" and "length\0" are truncations
NORMALIZED = {"finish_reason_upper", "finish_reason_nul"}
HARD_TASK = "What is 1 + 3?"


def test_every_hostile_reply_has_a_reason():
    assert sorted([*REASONS, *NORMALIZED]) == sorted([*MANGLE, *RAW, *STREAMED])


@pytest.mark.parametrize("fault", sorted(NORMALIZED))
def test_an_odd_spelling_of_length_is_a_truncation(tmp_path, server, fault):
    server.faults.append(fault)
    summary, rec = _shard(tmp_path, server, num_tasks=1)
    assert rec["status"].tolist() == ["ok", "ok"] and server.stats["requests"] == 1
    assert rec["finish_reason"].tolist() == ["length", "length"]


@pytest.fixture
def server():
    with FakeOpenAI(kit.answer) as s:
        yield s


def _shard(tmp_path, server, num_tasks: int = 3, **rollout):
    cfg = kit.make_config(
        server.base_url, 2, rollout={"max_attempts": 2, **rollout}, engine={"max_n": 2}
    )
    tasks = tmp_path / "tasks.parquet"
    if not tasks.exists():
        tasks = kit.make_tasks(tmp_path, cfg, num_tasks)
    out = tmp_path / "out.parquet"
    summary = run_shard(ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg))
    rec = pq.read_table(out).to_pandas().sort_values(["task_index", "rollout_index"])
    assert kit.check_records(rec, kit.load_tasks(tasks), cfg) == []
    return summary, rec.reset_index(drop=True)


@pytest.mark.parametrize("fault", sorted(REASONS))
def test_hostile_reply_once_is_retried_then_ok(tmp_path, server, fault):
    server.faults.append(fault)
    summary, rec = _shard(tmp_path, server, num_tasks=1)
    assert server.stats[f"fault:{fault}"] == 1 and server.stats["requests"] == 2
    assert rec["status"].tolist() == ["ok", "ok"] and rec["attempt"].tolist() == [2, 2]


@pytest.mark.parametrize("fault", sorted(REASONS))
def test_hostile_reply_forever_fails_its_rollouts_and_a_rerun_fills_them(tmp_path, server, fault):
    # every reply for one task is hostile; the other tasks are served normally
    server.fault_fn = lambda body: fault if HARD_TASK in json.dumps(body) else None
    summary, rec = _shard(tmp_path, server, max_failed_fraction=1.0)
    assert server.stats[f"fault:{fault}"] == 2  # both attempts
    failed = rec[rec["status"] != "ok"]
    assert failed["status"].tolist() == ["engine_error", "engine_error"]
    assert failed["task_index"].tolist() == [1, 1]
    assert all(e.startswith(REASONS[fault]) for e in failed["error"]), failed["error"].tolist()
    assert failed["reward"].isna().all() and failed["completion"].isna().all()
    assert failed["finish_reason"].isna().all() and failed["prompt_tokens"].isna().all()
    assert summary["by_status"] == {"engine_error": 2, "ok": 4}
    # the journal holds only schema-typed records: a new scan reads it whole
    scan = scan_journal(tmp_path / "journal")
    assert scan.keys.num_rows == 6 and scan.quarantined == 0 and scan.torn_lines == 0
    # the rerun against a healthy server asks only for the failed pair and fills it
    server.fault_fn = None
    before = len(server.requests)
    (tmp_path / "out.parquet").unlink()
    summary, rec = _shard(tmp_path, server)
    assert [HARD_TASK in json.dumps(b) for b in server.requests[before:]] == [True]
    assert rec["status"].tolist() == ["ok"] * 6
    assert summary["generated"] == 2 and summary["journaled_ok"] == 4


def _poison_tail(journal, records: list[dict]) -> None:
    """A tail as an older version wrote it: the raw reply's values, unvalidated."""
    journal.mkdir(parents=True, exist_ok=True)
    with (journal / "0-of-1_1-old-1-0.000000.jsonl").open("w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
        f.write('{"task_index": 0, "rollout_in')  # and a torn last line, as after a kill


def test_a_tail_that_does_not_fit_the_schema_is_quarantined(tmp_path, server, caplog):
    summary, rec = _shard(tmp_path, server, num_tasks=2)
    journal = tmp_path / "journal"
    good = rec.iloc[0].to_dict()
    for k, v in good.items():  # pandas' NaN back to the JSON null it was
        good[k] = None if v != v else v
    poisoned = [
        dict(good, task_index=0, rollout_index=1, completion=[{"type": "text", "text": "x"}]),
        dict(good, task_index=1, rollout_index=0, finish_reason=7),
        dict(good, task_index=1, rollout_index=1, prompt_tokens="12"),
        dict(good, task_index=1, rollout_index=1, completion="\ud800"),  # no file can hold it
        dict(good, task_index=0, rollout_index=0),  # a valid one among them: kept
    ]
    for path in journal.glob("*.parquet"):
        path.unlink()  # only the poisoned tail remains
    _poison_tail(journal, poisoned)
    with caplog.at_level(logging.WARNING, logger="rewardprof.store.journal"):
        scan = scan_journal(journal)
    assert scan.quarantined == 1 and scan.keys.num_rows == 1
    moved = journal / QUARANTINE / "0-of-1_1-old-1-0.000000.jsonl"
    assert moved.exists() and not (journal / moved.name).exists()
    assert (journal / "0-of-1_1-old-1-0.000000.parquet").exists()  # the valid record
    warning = [r.getMessage() for r in caplog.records if r.name.endswith(".journal")]
    assert len(warning) == 1
    assert "4 records do not fit the rollout schema (first: completion is list" in warning[0]
    assert str(moved) in warning[0]
    # the next run of the shard completes: the three quarantined rollouts are generated again
    before = len(server.requests)
    (tmp_path / "out.parquet").unlink()
    summary, rec = _shard(tmp_path, server, num_tasks=2)
    assert summary["journaled_ok"] == 1 and summary["generated"] == 3
    assert rec["status"].tolist() == ["ok"] * 4
    assert len(server.requests) - before == 2  # (0: rollout 1), (1: rollouts 0-1)
    # and so does the one after it, reusing everything
    (tmp_path / "out.parquet").unlink()
    summary, _ = _shard(tmp_path, server, num_tasks=2)
    assert summary["generated"] == 0 and summary["journaled_ok"] == 4
