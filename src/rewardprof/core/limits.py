"""Size and depth limits on what users hand in: source rows (sources/files.py) and each
entry's `options` (core/config.py). Past them the input is broken or hostile, not a task: a
JSONL row nested 200,000 deep would stop the parser with a RecursionError, and a YAML anchor
bomb (aliases of aliases) expands to billions of values when the config is written out.

`structure_problem` walks a value iteratively and counts every value it reaches, so aliases
that repeat one object count each time (that is the expansion), and stops at the first limit:
it answers in at most `max_values` steps whatever it is given.
"""

from __future__ import annotations

from typing import Any

MAX_ROW_BYTES = 64 << 20  # one JSONL line; longer is a broken file, not a task
MAX_ROW_DEPTH = 64  # nesting of objects and lists in one row
MAX_OPTIONS_VALUES = 100_000  # values in one entry's options, aliases expanded
MAX_OPTIONS_DEPTH = 32


def structure_problem(value: Any, max_depth: int, max_values: int | None = None) -> str | None:
    """What makes `value` too deep or too big (one phrase), else None."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if max_values is not None and seen > max_values:
            return (
                f"more than {max_values} values (YAML anchors and aliases count every time "
                f"they repeat)"
            )
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        stack.extend((c, depth + 1) for c in children)
    return None
