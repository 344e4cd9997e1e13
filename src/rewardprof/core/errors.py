"""The package's error tree: every error rewardprof raises on purpose derives from RewardprofError.

`rewardprof.cli.main` catches RewardprofError once and prints one line,
`rewardprof <command>: error: <message>`, then exits with the error's `exit_code` (2 unless a
class says otherwise); anything else is a bug and keeps its traceback. Messages name the file,
key or URL and what to do, so they need no traceback.

A class that one module raises lives in that module (MergeError in stages/merge.py, EngineError in
engine/server.py, ...); the classes several modules raise live here. Classes that callers also
catch as a builtin keep it as a second base (ConfigError is a ValueError).
"""

from __future__ import annotations


class RewardprofError(Exception):
    """Base of rewardprof's own errors; `exit_code` is what the command exits with."""

    exit_code: int = 2


class ConfigError(RewardprofError, ValueError):
    """A config problem; the message is one line naming the key (or file) and what to do."""
