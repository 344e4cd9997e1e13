"""Validation of an entry's `options:` for a built-in environment (a typo fails at materialize)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from rewardprof.core.config import ConfigError


def check_options(env_name: str, options: dict[str, Any], allowed: Iterable[str]) -> None:
    allowed = sorted(allowed)
    for key in options:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"valid: {', '.join(allowed)}"
            raise ConfigError(f"environment {env_name!r}: unknown option {key!r}; {hint}")


def with_example(messages: list[dict[str, Any]], example: list[dict[str, str]]) -> list[dict]:
    """Messages with a worked example exchange (user, assistant) before the task's first user
    turn (after any system message): small models copy the answer format they are shown."""
    i = 0
    while i < len(messages) and messages[i]["role"] == "system":
        i += 1
    return [*messages[:i], *example, *messages[i:]]
