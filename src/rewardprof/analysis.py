"""Subcommands that turn a profile into decisions: export, report, estimate, check.

Registered through cli.EXTRA_COMMAND_MODULES; each module's `register(subparsers)` adds one.
"""

from __future__ import annotations

import importlib
from typing import Any

MODULES = ["rewardprof.export", "rewardprof.report", "rewardprof.estimate", "rewardprof.check"]


def register(sub: Any) -> None:
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency, not a module still to be written
                raise
            continue
        module.register(sub)
