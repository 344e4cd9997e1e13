"""Arrow-built JSONL must parse back to exactly what json.dumps would have written."""

from __future__ import annotations

import json

import pyarrow as pa

from rewardprof.store.jsonl import json_objects, with_key, write_table_jsonl


def test_round_trip_of_awkward_values(tmp_path):
    strings = [
        "plain",
        'quote " and \\ backslash',
        "new\nline\ttab\r",
        "bell \x01 \x1f",
        "ünïcödé ✓ /slash",
        None,
    ]
    t = pa.table(
        {
            "s": strings,
            "f": [0.1, 1.0, float("nan"), float("inf"), None, 1e-300],
            "i": pa.array([1, None, -3, 2**40, 0, 5], pa.int64()),
            "b": [True, False, None, True, False, True],
            "mean/reward": [0.5] * 6,
            "sample": [
                '{"a":1}',
                "{}",
                '{"nested":{"x":[1,2]}}',
                '{"k":"v"}',
                '{"q":null}',
                '{"z":"\\u00e9"}',
            ],
        }
    )
    write_table_jsonl(t, tmp_path / "t.jsonl", raw=("sample",))
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["s"] for r in rows] == strings
    assert rows[0]["f"] == 0.1 and rows[1]["f"] == 1.0 and rows[5]["f"] == 1e-300
    assert rows[2]["f"] is None and rows[3]["f"] is None and rows[4]["f"] is None
    assert [r["i"] for r in rows] == [1, None, -3, 2**40, 0, 5]
    assert [r["b"] for r in rows] == [True, False, None, True, False, True]
    assert rows[0]["mean/reward"] == 0.5
    assert rows[2]["sample"] == {"nested": {"x": [1, 2]}} and rows[5]["sample"] == {"z": "é"}
    assert list(rows[0]) == ["s", "f", "i", "b", "mean/reward", "sample"]


def test_with_key_appends_to_objects_including_empty():
    objs = pa.chunked_array([pa.array(['{"a":1}', "{}"])])
    vals = pa.chunked_array([pa.array(['{"w":2}', "3"])])
    out = [json.loads(x) for x in with_key(objs, "rp", vals).to_pylist()]
    assert out == [{"a": 1, "rp": {"w": 2}}, {"rp": 3}]


def test_empty_table(tmp_path):
    t = pa.table({"x": pa.array([], pa.int64())})
    assert len(json_objects(t)) == 0
    write_table_jsonl(t, tmp_path / "e.jsonl")
    assert (tmp_path / "e.jsonl").read_text() == ""
