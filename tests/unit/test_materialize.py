from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import math_row, write_jsonl

from rewardprof.manifest.load import validate_config
from rewardprof.sources.files import SourceError
from rewardprof.stages import MaterializePaths, ShardPaths, materialize, shard
from rewardprof.stages.materialize import make_task_id
from rewardprof.store.shards import ShardPosition


def _cfg(entries):
    return validate_config({"entries": entries})


def _materialize(cfg, tasks, report):
    return materialize.run(cfg, MaterializePaths(tasks=tasks, report=report))


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
        (
            b'{"prompt": "x", "expected_answer": "1", "x": '
            + b"[" * 200_000
            + b"]" * 200_000
            + b"}",
            "1: row nested deeper than 64 levels",
        ),
        (
            b'{"prompt": "x", "expected_answer": "1", "x": ' + b"[" * 100 + b"]" * 100 + b"}",
            "1: row nested deeper than 64 levels",
        ),
        (b'{"question": "What?", "expected_answer": NaN}', "1: malformed JSON (NaN is not a JSON"),
        (b'{"question": "  ", "expected_answer": "4"}', "1: question: empty; the task would have"),
        (b'{"question": "What?", "expected_answer": ""}', "1: expected_answer: empty"),
        (b'{"messages": [{"role": "user", "content": " "}], "expected_answer": "4"}', "1: empty "),
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
        paths = ShardPaths(
            tasks=tmp_path / "t.parquet", out=tmp_path / f"{i}.parquet", shard=ShardPosition(i, 3)
        )
        n = shard.run(None, paths)["num_tasks"]
        idx = pq.read_table(tmp_path / f"{i}.parquet").column("task_index").to_pylist()
        assert n == len(idx) and all(x % 3 == i for x in idx)
        seen += idx
    assert sorted(seen) == list(range(10))


def test_bad_rows_are_collected_first_ten_per_source_then_a_count(tmp_path):
    good = math_row("What is 1 + 1?", "2")
    rows = [good, {"prompt": "x"}] * 8 + [good]  # lines 2, 4, ..., 16 miss the answer
    a = write_jsonl(tmp_path / "a.jsonl", rows)
    b = tmp_path / "b.jsonl"
    b.write_bytes(b'{"expected_answer": "1", "prompt": "x"}\n{"expected_answer": \n[1]\n')
    cfg = _cfg(
        [
            {"label": "a", "environment": "math", "source": str(a)},
            {"label": "b", "environment": "math", "source": str(b)},
        ]
    )
    with pytest.raises(SourceError) as info:
        _materialize(cfg, tmp_path / "out" / "t.parquet", tmp_path / "out" / "r.json")
    lines = str(info.value).splitlines()
    assert lines[0].startswith("10 bad rows in 2 source(s); fix or remove them and rerun")
    missing = "missing field(s) needed by environment 'math'"
    assert [ln.split(": ", 1)[0] for ln in lines[1:9]] == [f"{a}:{i}" for i in range(2, 17, 2)]
    assert all(missing in ln for ln in lines[1:9])
    assert lines[9:] == [
        f"{b}:2: malformed JSON (Expecting value)",
        f"{b}:3: expected a JSON object, got list",
    ]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_more_bad_rows_than_shown_are_counted(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"prompt": f"q{i}"} for i in range(25)])
    cfg = _cfg([{"label": "a", "environment": "math", "source": str(a)}])
    with pytest.raises(SourceError) as info:
        _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")
    lines = str(info.value).splitlines()
    assert len(lines) == 1 + 10 + 1
    assert lines[-1] == f"{a}: ... and 15 more bad rows"


def test_nan_answer_in_a_parquet_source(tmp_path):
    src = tmp_path / "a.parquet"
    table = pa.table(
        {"question": ["What?", "Why?"], "expected_answer": pa.array([1.0, float("nan")])}
    )
    pq.write_table(table, src)
    cfg = _cfg([{"label": "a", "environment": "math", "source": str(src)}])
    with pytest.raises(SourceError) as info:
        _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")
    assert f"{src}:2: expected_answer: nan is not a finite number" in str(info.value)


def test_a_directory_named_jsonl_is_one_line(tmp_path):
    (tmp_path / "d.jsonl").mkdir()
    cfg = _cfg([{"label": "a", "environment": "math", "source": str(tmp_path / "d.jsonl")}])
    with pytest.raises(SourceError, match="d.jsonl: source of entry 'a' is not a file"):
        _materialize(cfg, tmp_path / "t.parquet", tmp_path / "r.json")


def test_a_code_test_that_never_calls_the_program_is_refused_with_its_line(tmp_path):
    """A test that passes anything (HumanEval's `check` without its `check(...)` line) is a
    bad row, named by file:line and which test."""
    good = {"prompt": "add(a, b)", "test_list": ["assert add(1, 2) == 3"]}
    never = {
        "prompt": "add(a, b)",
        "test_code": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    }
    src = tmp_path / "code.jsonl"
    src.write_text(json.dumps(good) + "\n" + json.dumps(never) + "\n")
    cfg = _cfg([{"label": "a", "environment": "code", "source": str(src)}])
    with pytest.raises(SourceError) as info:
        _materialize(cfg, tmp_path / "out" / "t.parquet", tmp_path / "out" / "r.json")
    assert f"{src}:2: test_code never calls the program" in str(info.value)
    assert not any((tmp_path / "out").iterdir())
