"""Reading a replica's gauges from its Prometheus text page (vLLM's /metrics).

A sample line is `name{labels} value [timestamp]`: the value is the field after the labels, never
the last one (a timestamp in milliseconds would read as 1.7e12 sequences waiting). A sample whose
value is not a finite number of zero or more (`NaN`, `+Inf`, `-1`, `garbage`), or whose line does
not parse, is left out of the sum and named in `problems`, so the caller can warn; nothing a
replica serves raises here. Reading is linear in the page (the caller bounds the page's size).
"""

from __future__ import annotations

import math

WAITING_GAUGE = "vllm:num_requests_waiting"
RUNNING_GAUGE = "vllm:num_requests_running"


def waiting_sequences(page: str, problems: list[str] | None = None) -> int | None:
    """The sum of vLLM's `vllm:num_requests_waiting` gauges in a Prometheus text page (one per
    engine or model label set; vLLM counts each of a request's n samples); None if absent."""
    return gauge_sum(page, WAITING_GAUGE, problems)


def gauge_sum(page: str, gauge: str, problems: list[str] | None = None) -> int | None:
    """The sum of the `gauge` samples of a Prometheus text page; None if there is none usable.
    Samples that cannot be read are skipped and described in `problems` (when given)."""
    total, found = 0.0, False
    for line in page.splitlines():
        if not line.startswith(gauge):
            continue
        try:
            value = sample_value(line, gauge)
        except ValueError as exc:
            if problems is not None:
                problems.append(f"{gauge}: {exc}")
            continue
        if value is not None:
            total, found = total + value, True
    if found and not math.isfinite(total):  # finite samples whose sum overflows
        if problems is not None:
            problems.append(f"{gauge}: the samples' sum is not finite")
        return None
    return int(total) if found else None


def sample_value(line: str, gauge: str) -> float | None:
    """The value of a sample line of `gauge` (None: the line is another metric's, e.g.
    `vllm:num_requests_waiting_by_reason`); ValueError saying why when it cannot be used."""
    rest = line[len(gauge) :]
    if rest.startswith("{"):
        end = _labels_end(rest)
        if end is None:
            raise ValueError("label set not closed")
        rest = rest[end:]
    elif rest and not rest[0].isspace():
        return None
    fields = rest.split()
    if len(fields) not in (1, 2):
        raise ValueError(f"{len(fields)} fields after the name, not a value and a timestamp")
    if len(fields) == 2 and not fields[1].lstrip("-").isdigit():
        raise ValueError(f"timestamp {fields[1][:40]!r} is not an integer")
    try:
        value = float(fields[0])
    except ValueError:
        raise ValueError(f"value {fields[0][:40]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"value {fields[0][:40]} is not a finite count")
    return value


def _labels_end(text: str) -> int | None:
    """The index just past the `}` closing the label set `text` starts with (label values are
    quoted and may hold `}` and escaped quotes); None when it is never closed."""
    quoted = escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted:
            escaped, quoted = char == "\\", char != '"'
        elif char == '"':
            quoted = True
        elif char == "}":
            return i + 1
    return None
