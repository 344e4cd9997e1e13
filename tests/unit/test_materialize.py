from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from helpers import math_row, write_jsonl

from rewardprof.core.config import validate_config
from rewardprof.sources.files import SourceError
from rewardprof.stages import StagePaths, materialize, shard
from rewardprof.stages.materialize import make_task_id


def _cfg(entries):
    return validate_config({"entries": entries})


def _materialize(cfg, tasks, report):
    return materialize.run(cfg, StagePaths(tasks=tasks, report=report))


def test_indices_by_cumulative_offsets_and_report(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [math_row(f"q{i}", str(i)) for i in range(5)])
    b = write_jsonl(tmp_path / "b.jsonl", [math_row(f"r{i}", str(i)) for i in range(3)])
    cfg = _cfg(
        [
            {"label": "a", "environment": "math", "source": str(a), "limit": 2},
            {"label": "b", "environment": "math", "source": str(b), "num_repeats": 2},
        ]
    )
    report = _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")
    t = pq.read_table(tmp_path / "t.parquet").to_pandas()
    assert t["task_index"].tolist() == [0, 1, 2, 3, 4]
    assert t["label"].tolist() == ["a", "a", "b", "b", "b"]
    assert t["num_repeats"].tolist() == [4, 4, 2, 2, 2]
    assert json.loads(t["messages"][0]) == [{"role": "user", "content": "q0"}]
    row0 = json.loads(t["row"][0])
    assert t["task_id"][0] == make_task_id("math", t["row"][0]) and row0["expected_answer"] == "0"
    ea, eb = report["entries"]
    assert (ea["start"], ea["end"], ea["rows_read"], ea["rows_selected"]) == (0, 2, 2, 2)
    assert (eb["start"], eb["end"], eb["rows_selected"]) == (2, 5, 3)
    assert len(ea["source_sha256"]) == 64 and ea["seed"] is None
    assert report["num_rollouts_expected"] == 2 * 4 + 3 * 2
    assert json.loads((tmp_path / "r.json").read_text()) == report


def test_random_sample_is_seeded_uniform_and_keeps_source_order(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [math_row(f"q{i}", str(i)) for i in range(200)])
    picks = []
    for seed in (1, 1, 2):
        cfg = _cfg(
            [
                {
                    "label": "a",
                    "environment": "math",
                    "source": str(src),
                    "limit": 10,
                    "sample": "random",
                    "seed": seed,
                }
            ]
        )
        rep = _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")
        assert rep["entries"][0]["rows_read"] == 200 and rep["entries"][0]["seed"] == seed
        lines = pq.read_table(tmp_path / "t.parquet").column("source_line").to_pylist()
        assert lines == sorted(lines) and len(set(lines)) == 10
        picks.append(lines)
    assert picks[0] == picks[1] != picks[2]


@pytest.mark.parametrize(
    "content, reason",
    [
        (b'{"expected_answer": "1", "prompt": "x"}\n{"expected_answer": \n', "2: malformed JSON"),
        (b'{"expected_answer": "1", "prompt": "x"}\n\xff\xfe\n', "2: not valid UTF-8"),
        (b"[1, 2]\n", "1: expected a JSON object, got list"),
        (b'{"prompt": "x"}\n', "1: missing field(s) needed by environment 'math'"),
        (b'{"expected_answer": "1"}\n', "1: no prompt"),
    ],
)
def test_bad_rows_fail_with_path_line_and_leave_nothing(tmp_path, content, reason):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(content)
    cfg = _cfg([{"label": "a", "environment": "math", "source": str(src)}])
    with pytest.raises(SourceError) as info:
        _materialize(cfg, tmp_path / "out" / "t.parquet", tmp_path / "out" / "r.json")
    assert f"{src}:{reason}" in str(info.value)
    assert not any((tmp_path / "out").iterdir())


def test_empty_and_missing_sources(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    cfg = _cfg([{"label": "a", "environment": "math", "source": str(tmp_path / "empty.jsonl")}])
    with pytest.raises(SourceError, match="has no rows"):
        _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")
    cfg = _cfg([{"label": "a", "environment": "math", "source": str(tmp_path / "nope.jsonl")}])
    with pytest.raises(SourceError, match="nope.jsonl: source file of entry 'a' not found"):
        _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")
    assert not (tmp_path / "t.parquet").exists()


def test_parquet_source_and_shards_partition(tmp_path):
    import pyarrow as pa

    rows = [math_row(f"q{i}", str(i)) for i in range(10)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    cfg = _cfg([{"label": "a", "environment": "math", "source": str(tmp_path / "s.parquet")}])
    _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")
    seen = []
    for i in range(3):
        paths = StagePaths(
            tasks=tmp_path / "t.parquet", out=tmp_path / f"{i}.parquet", shard=i, num_shards=3
        )
        n = shard.run(None, paths)["num_tasks"]
        idx = pq.read_table(tmp_path / f"{i}.parquet").column("task_index").to_pylist()
        assert n == len(idx) and all(x % 3 == i for x in idx)
        seen += idx
    assert sorted(seen) == list(range(10))
