"""Answer and field extraction shared by the environments (boxed answers, tagged spans, dotted
field paths, the last user turn), so that no environment imports another.

Every extractor is linear in the completion's length: a completion is model output, and a
quadratic scan of 32,768 characters (`"\\boxed{" * 4681`) takes seconds."""

from __future__ import annotations

import re
from typing import Any

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (nested braces handled, `\\{` skipped), or
    None. One pass matches every brace (a box's closing brace depends only on what follows
    it), so a box that never closes costs nothing more."""
    opening = {m.end() - 1: m.end() for m in _BOX_RE.finditer(text)}  # its "{" -> content
    if not opening:
        return None
    closing: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:  # an escaped character, e.g. \{
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            closing[stack.pop()] = i
        i += 1
    for brace in sorted(opening, reverse=True):
        if brace in closing:
            return text[opening[brace] : closing[brace]]
    return None


def tag_spans(text: str, tag: str) -> list[tuple[int, int, int, int]]:
    """(start, end, inner start, inner end) of each <tag>...</tag> (case-insensitive) as
    re.findall("<tag>(.*?)</tag>") pairs them: each opening with the first closing after it,
    the search going on after that closing. One pass over the tags."""
    marks = re.finditer(rf"<(/?){re.escape(tag)}>", text, re.IGNORECASE)
    spans, opened = [], None
    for m in marks:
        if not m.group(1):
            if opened is None:
                opened = m
        elif opened is not None:
            spans.append((opened.start(), m.end(), opened.end(), m.start()))
            opened = None
    return spans


def get_field(row: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted path such as "verifier_metadata.unit_tests", or None if absent."""
    cur: Any = row
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The content of the last user message ("" if there is none)."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    return str(users[-1]) if users else ""
