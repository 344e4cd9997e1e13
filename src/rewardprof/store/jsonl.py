"""Fast JSONL from an Arrow table: every line is built with Arrow string kernels, not a Python
loop per row (a sweep's profile has ~750k rows; json.dumps per row costs tens of seconds).

Columns named in `raw` already hold JSON text (e.g. `sample`, the canonical source row) and are
embedded as JSON values, not as strings. Floats are written in shortest round-trip form (an
integral float is written like an integer, `1` for 1.0: the same JSON number), NaN/inf as null;
strings are JSON-escaped.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rewardprof.core.atomic import atomic_path

_ESCAPES = [("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")]


def _json_string(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    arr = pc.cast(arr, pa.string())
    # rare control characters other than \n \r \t: let json.dumps escape those rows
    odd = pc.match_substring_regex(arr, r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
    if pc.any(odd).as_py():
        arr = _slow_escape(arr)
        return pc.fill_null(pc.binary_join_element_wise('"', arr, '"', ""), "null")
    for a, b in _ESCAPES:
        arr = pc.replace_substring(arr, a, b)
    return pc.fill_null(pc.binary_join_element_wise('"', arr, '"', ""), "null")


def _slow_escape(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    out = [None if v is None else json.dumps(v, ensure_ascii=False)[1:-1] for v in arr.to_pylist()]
    return pa.chunked_array([pa.array(out, pa.string())])


def _json_value(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    t = arr.type
    if pa.types.is_floating(t):
        s = pc.cast(arr, pa.string())
        if not pc.all(pc.is_finite(arr)).as_py():  # NaN/inf are not JSON: null
            s = pc.if_else(pc.is_finite(arr), s, pa.scalar(None, pa.string()))
        return pc.fill_null(s, "null")
    if pa.types.is_integer(t):
        return pc.fill_null(pc.cast(arr, pa.string()), "null")
    if pa.types.is_boolean(t):
        return pc.fill_null(pc.if_else(arr, "true", "false"), "null")
    return _json_string(arr)


def json_objects(table: pa.Table, raw: tuple[str, ...] = ()) -> pa.ChunkedArray:
    """One JSON object text per row of `table` (keys in column order)."""
    parts: list = []
    for i, name in enumerate(table.column_names):
        key = json.dumps(name, ensure_ascii=False)
        parts.append(("{" if i == 0 else ",") + key + ":")
        col = table.column(name)
        if name in raw:
            parts.append(pc.fill_null(pc.cast(col, pa.string()), "null"))
        else:
            parts.append(_json_value(col))
    if not parts:
        return pa.chunked_array([pa.array(["{}"] * table.num_rows, pa.string())])
    parts.append("}")
    return pc.binary_join_element_wise(*parts, "")


def with_key(objects: pa.ChunkedArray, key: str, value: pa.ChunkedArray) -> pa.ChunkedArray:
    """Add `"key": value` (value: JSON text) at the end of every JSON object text."""
    body = pc.utf8_slice_codeunits(objects, 0, -1)  # drop the closing brace
    empty = pc.equal(pc.utf8_trim_whitespace(body), "{")
    sep = pc.if_else(empty, "", ",")
    return pc.binary_join_element_wise(body, sep, json.dumps(key) + ":", value, "}", "")


def write_chunks(lines: pa.ChunkedArray, f) -> None:
    for chunk in lines.chunks:
        if len(chunk) == 0:
            continue
        # with no nulls, the value buffer between the first and last offset is the text
        chunk = pc.binary_join_element_wise(pc.fill_null(chunk, "null"), "\n", "")
        width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        offsets = np.frombuffer(chunk.buffers()[1], dtype=width)
        start, end = offsets[chunk.offset], offsets[chunk.offset + len(chunk)]
        f.write(memoryview(chunk.buffers()[2])[start:end])


# Rows per slice: an Arrow string array holds at most 2 GB, and a sweep's profile (~750k rows
# with their 1-2 kB `sample`) is more than that as JSON text; slices also bound memory.
SLICE_ROWS = 32768


def write_table_jsonl(table: pa.Table, path: str | Path, raw: tuple[str, ...] = ()) -> int:
    with atomic_path(Path(path)) as tmp, tmp.open("wb") as f:
        for start in range(0, table.num_rows, SLICE_ROWS):
            write_chunks(json_objects(table.slice(start, SLICE_ROWS), raw), f)
    return table.num_rows
