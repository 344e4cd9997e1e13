"""Answer and field extraction shared by the environments (boxed answers, dotted field paths,
the last user turn), so that no environment imports another."""

from __future__ import annotations

import re
from typing import Any

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (nested braces handled), or None."""
    found = None
    for m in _BOX_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "\\" and i + 1 < len(text):  # skip escaped braces like \{
                i += 2
                continue
            depth += c == "{"
            depth -= c == "}"
            i += 1
        if depth == 0:
            found = text[m.end() : i - 1]
    return found


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
