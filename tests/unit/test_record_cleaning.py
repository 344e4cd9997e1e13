"""Text is cleaned in one place before a record is journaled (rewardprof.store.record): lone
surrogates and NULs (from a program's exception, a server's reply) and length. A program's
fault stays its reward 0, never a verifier_error, and every record is writable."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from rewardprof.store.journal import JournalWriter, scan_journal
from rewardprof.store.record import COMPLETION_CHARS, ERROR_CHARS, EXTRAS_CHARS, journal_record


def _rec(**fields) -> dict:
    base = {"task_index": 0, "rollout_index": 0, "task_id": "t", "status": "ok", "reward": 0.0}
    return {**base, **fields}


def test_a_lone_surrogate_in_a_wrong_programs_error_keeps_its_reward_0():
    # a code task's program raised with '\ud800' in its message: a wrong answer, reward 0
    extras = json.dumps({"error": "ValueError: \ud800"}, ensure_ascii=False)
    out = journal_record(_rec(extras=extras, completion="def f():\x00 pass\udfff"))
    assert out["status"] == "ok" and out["reward"] == 0.0
    assert out["completion"] == "def f():\ufffd pass\ufffd"
    assert json.loads(out["extras"]) == {"error": "ValueError: \ufffd"}


def test_text_is_bounded_and_says_it_was_cut():
    out = journal_record(
        _rec(
            completion="a" * (COMPLETION_CHARS + 10),
            error="e" * (ERROR_CHARS * 3),
            label="l" * 5000,
            extras=json.dumps({"x": "y" * EXTRAS_CHARS}),
        )
    )
    assert len(out["completion"]) == COMPLETION_CHARS
    assert out["completion"].endswith("[cut: 10 more characters]")
    assert len(out["error"]) == ERROR_CHARS and "more characters]" in out["error"]
    assert len(out["label"]) <= 1024
    assert "were not kept" in json.loads(out["extras"])["cut"]  # still JSON


def test_every_cleaned_record_is_writable_and_reads_back(tmp_path):
    hostile = ["\ud800", "\x00" * 10, "x\udc80y", "\U0001f600", "a" * (COMPLETION_CHARS + 1)]
    writer = JournalWriter(tmp_path, "w", interval_s=3600, max_records=1000)
    for i, text in enumerate(hostile):
        writer.append(journal_record(_rec(rollout_index=i, completion=text, error=text)))
    writer.close()
    assert [p.suffix for p in tmp_path.iterdir()] == [".parquet"]
    table = pq.read_table(next(tmp_path.iterdir()))
    assert table.num_rows == len(hostile) and table.column("status").to_pylist() == ["ok"] * 5
    assert scan_journal(tmp_path).keys.num_rows == len(hostile)
