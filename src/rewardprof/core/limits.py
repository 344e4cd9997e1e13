"""Size and depth limits on what users hand in: source rows (sources/files.py) and each
entry's `options` (core/config.py). Past them the input is broken or hostile, not a task: a
JSONL row nested 200,000 deep would stop the parser with a RecursionError, and a YAML anchor
bomb (aliases of aliases) expands to billions of values when the config is written out.

`structure_problem` walks a value iteratively and counts every value it reaches, so aliases
that repeat one object count each time (that is the expansion), and stops at the first limit:
it answers in at most `max_values` steps whatever it is given.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rewardprof.core.errors import RewardprofError

MAX_ROW_BYTES = 64 << 20  # one JSONL line; longer is a broken file, not a task
MAX_ROW_DEPTH = 64  # nesting of objects and lists in one row
MAX_OPTIONS_VALUES = 100_000  # values in one entry's options, aliases expanded
MAX_OPTIONS_DEPTH = 32
# The whole config: each top-level section (and each entry) is checked before it is validated,
# copied or written out, so no free-form value (engine.extra_body, a generator's config,
# serve_env, ...) is unbounded.
MAX_CONFIG_VALUES = 500_000
MAX_CONFIG_DEPTH = 40
MAX_CONFIG_TEXT = 1 << 20  # characters of one string (a judge's prompt template fits)
MAX_NAME_LENGTH = 64  # a label or run name: it names files and directories
# Nesting of a JSON text read from outside (a reply, a row, a journal line, a model list) before
# it is parsed: far under the interpreter's recursion limit, far over what any of them holds.
MAX_JSON_DEPTH = 256
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


class TooDeep(RewardprofError, ValueError):
    """A JSON text nested deeper than MAX_JSON_DEPTH: refused before the parser recurses."""


def loads_bounded(text: str | bytes, **kwargs: Any) -> Any:
    """json.loads(text, **kwargs), refusing (TooDeep) a text nested deeper than MAX_JSON_DEPTH
    before it is parsed. Not the parser's RecursionError, caught: at the recursion limit a
    finalizer the garbage collector runs meanwhile (a socket's, a coroutine's) fails too, and
    an interpreter that reports those (pytest does) fails on them."""
    # latin-1 maps bytes to characters one to one: the ASCII brackets, quotes and backslashes
    # of UTF-8 stay where they are (no byte of a multi-byte UTF-8 character is ASCII)
    chars = text.decode("latin-1") if isinstance(text, bytes) else text
    if chars.count("[") + chars.count("{") > MAX_JSON_DEPTH:  # else it cannot be that deep
        depth = 0
        # strings out first: a bracket inside one is not nesting (valid JSON pairs its quotes
        # as this pattern does, and the parser stops at the first place that does not)
        for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub("", chars)):
            depth += 1 if bracket in "[{" else -1
            if depth > MAX_JSON_DEPTH:
                raise TooDeep(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(text, **kwargs)


def small_structure(value: Any) -> Any:
    """`value` (a validator's), unless it is deeper or bigger than a free-form config section
    may be (MAX_OPTIONS_DEPTH, MAX_OPTIONS_VALUES): checked before anything copies or writes it
    out, as an anchor bomb expands to billions of values."""
    problem = structure_problem(value, MAX_OPTIONS_DEPTH, MAX_OPTIONS_VALUES)
    if problem:
        raise ValueError(problem)
    return value


def structure_problem(
    value: Any, max_depth: int, max_values: int | None = None, max_text: int | None = None
) -> str | None:
    """What makes `value` too deep or too big (one phrase), else None; with `max_text`, a
    string (value or key) longer than that is too big too."""
    return _walk(value, max_depth, max_values, max_text)[0]


def _walk(
    value: Any, max_depth: int, max_values: int | None, max_text: int | None
) -> tuple[str | None, int]:
    """(structure_problem's answer, how many values it looked at)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if max_values is not None and seen > max_values:
            return (
                f"more than {max_values} values (YAML anchors and aliases count every time "
                f"they repeat)",
                seen,
            )
        if max_text is not None and isinstance(item, str) and len(item) > max_text:
            return f"a text of {len(item)} characters (at most {max_text})", seen
        if isinstance(item, dict):
            children: Any = [*item.values(), *item.keys()] if max_text else item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels", seen
        stack.extend((c, depth + 1) for c in children)
    return None, seen


def config_problem(data: Any) -> str | None:
    """What makes a config (as loaded) too deep or too big, naming where: `engine.extra_body:
    nested deeper than 40 levels`; else None. At most MAX_CONFIG_VALUES steps in all."""
    if not isinstance(data, dict):
        return None
    budget = MAX_CONFIG_VALUES
    for key, section in data.items():
        parts = section.items() if isinstance(section, dict) else [(None, section)]
        if key == "entries" and isinstance(section, list):
            parts = [(f"[{i}]", e) for i, e in enumerate(section)]
        for sub, value in parts:
            where = str(key) if sub is None else f"{key}{sub}" if sub[:1] == "[" else f"{key}.{sub}"
            problem, seen = _walk(value, MAX_CONFIG_DEPTH, budget, MAX_CONFIG_TEXT)
            if problem and problem.startswith("more than"):
                problem = (
                    f"the config has more than {MAX_CONFIG_VALUES} values by here (YAML "
                    f"anchors and aliases count every time they repeat)"
                )
            if problem:
                return f"{where[:80]}: {problem}"
            budget -= seen
    return None
