"""The two tables that flow between stages, side by side: the tasks table (materialize ->
shard -> rollout) and the rollout record (rollout -> merge -> profile); the status values are
in core/kinds.py."""

from __future__ import annotations

import pyarrow as pa

# One row per task: materialize/tasks.parquet and every shards/<i>-of-<n>.parquet.
TASKS_SCHEMA = pa.schema(
    [
        ("task_index", pa.int64()),  # 0..T-1 over all entries, by cumulative offsets in order
        ("task_id", pa.string()),  # content hash of environment + the row's canonical JSON
        ("label", pa.string()),  # the entry's label: the profile's grouping
        ("environment", pa.string()),  # the registered environment that verifies the task
        ("num_repeats", pa.int32()),  # K: the entry's rollouts per task
        ("source_line", pa.int64()),  # 1-based line (JSONL) or row (Parquet, generator)
        ("messages", pa.string()),  # prompt messages, JSON text, built by the environment
        ("row", pa.string()),  # the original row, canonical JSON text
    ]
)


# Key columns are all a resuming job reads from the journal; completion text is never parsed
# to find out what is collected.
KEY_COLUMNS = ["task_index", "rollout_index", "task_id", "status", "gen_key", "finished_at"]
KEY_COLUMNS.append("reward")  # adaptive sampling plans its rounds from rewards, reading no text

ROLLOUT_SCHEMA = pa.schema(
    [
        ("task_index", pa.int64()),
        ("rollout_index", pa.int32()),
        ("task_id", pa.string()),
        ("label", pa.string()),
        ("status", pa.string()),
        ("reward", pa.float64()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        # where completion_tokens came from: "engine" (the sample's own token ids), "usage"
        # (usage.completion_tokens of a response with this one sample, or what remained of it),
        # "apportioned" (a several-sample usage total split by text length: an estimate that
        # depends on request batching); null: no count, or a record from before this column
        ("completion_tokens_source", pa.string()),
        ("completion", pa.string()),
        ("extras", pa.string()),  # verifier extras, JSON text
        ("error", pa.string()),  # failure detail, one line
        ("attempt", pa.int32()),  # HTTP attempts the request took
        ("request_n", pa.int32()),  # samples asked for in the request this came from
        ("seed", pa.int64()),
        ("gen_key", pa.string()),  # fingerprint of model + sampling; other keys are not reused
        ("model", pa.string()),
        ("engine", pa.string()),
        ("started_at", pa.float64()),
        ("finished_at", pa.float64()),
        ("latency_s", pa.float64()),  # engine request latency (shared by the request's samples)
        ("verify_s", pa.float64()),
        ("writer", pa.string()),  # journal writer id
    ]
)

COLUMN_NAMES = ROLLOUT_SCHEMA.names


def conform(table: pa.Table) -> pa.Table:
    """`table` as ROLLOUT_SCHEMA: columns added since it was written (journal segments and
    shard outputs of older versions) come back null, in schema order."""
    missing = [f for f in ROLLOUT_SCHEMA if f.name not in table.column_names]
    for f in missing:
        table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(COLUMN_NAMES).cast(ROLLOUT_SCHEMA)


def record_problem(record: dict) -> str | None:
    """Why `record` cannot be a row of ROLLOUT_SCHEMA, or None when it can: every value is null
    or of its column's type (an int for an integer column, within its bit width; an int or
    float for a float column; text that UTF-8 can hold for a string column). The journal
    checks this before it writes a record, so a record that reached it is always writable as
    a segment."""
    for field in ROLLOUT_SCHEMA:
        value = record.get(field.name)
        if value is None:
            continue
        kind = field.type
        if pa.types.is_string(kind):
            if not isinstance(value, str):
                return f"{field.name} is {type(value).__name__}, not a string"
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return f"{field.name} is not valid Unicode (lone surrogate at {exc.start})"
        elif isinstance(value, bool):  # an int subclass, never a count or a reward
            return f"{field.name} is bool, not a number"
        elif pa.types.is_integer(kind):
            if not isinstance(value, int):
                return f"{field.name} is {type(value).__name__}, not an integer"
            if not -(2 ** (kind.bit_width - 1)) <= value < 2 ** (kind.bit_width - 1):
                return f"{field.name} is {value}, outside {kind}"
        elif not isinstance(value, (int, float)):
            return f"{field.name} is {type(value).__name__}, not a number"
    return None
