"""Environment registry: built-ins by name, third-party ones through an entry-point group.

A third-party package registers `[project.entry-points."rewardprof.environments"]
my_env = "my_pkg.my_module:MyEnvironment"`; a built-in is one line in BUILTIN below and one
module of this package, or one sub-package whose `__init__.py` is the environment (its other
modules the environment's parts: `code/`). Config validation imports an environment's module to
read its `Options` model, so a module keeps its verifier library's import inside the functions
that use it.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from rewardprof.environments.base import (
    Environment,
    RowError,
    Verdict,
    VerifyContext,
    extract_messages,
)
from rewardprof.environments.options import EnvironmentOptions

ENTRY_POINT_GROUP = "rewardprof.environments"

# name -> "module:Class"; imported lazily so a missing optional verifier library only matters
# to the runs that use that environment.
BUILTIN: dict[str, str] = {
    "math": "rewardprof.environments.math:MathEnvironment",
    "mcq": "rewardprof.environments.mcq:MCQEnvironment",
    "reasoning_gym": "rewardprof.environments.reasoning_gym:ReasoningGymEnvironment",
    "code": "rewardprof.environments.code:CodeEnvironment",
    "instruction_following": (
        "rewardprof.environments.instruction_following:InstructionFollowingEnvironment"
    ),
    "llm_judge": "rewardprof.environments.llm_judge:LLMJudgeEnvironment",
    # environments that act (rewardprof.environments.acting), under NeMo Gym's names
    "example_multi_step": "rewardprof.environments.nemo_multi_step:MultiStepEnvironment",
    "example_session_state_mgmt": (
        "rewardprof.environments.nemo_session_counter:SessionCounterEnvironment"
    ),
    "xlam_fc": "rewardprof.environments.nemo_xlam_fc:XlamFcEnvironment",
    "math_with_code": "rewardprof.environments.nemo_math_with_code:MathWithCodeEnvironment",
    "ns_tools": "rewardprof.environments.nemo_ns_tools:NsToolsEnvironment",
    # any NeMo Gym resource server, over its HTTP protocol
    "nemo_gym": "rewardprof.environments.nemo_gym_remote:NemoGymRemoteEnvironment",
    "single_step_tool_use_with_argument_comparison": (
        "rewardprof.environments.nemo_single_step:SingleStepToolUseEnvironment"
    ),
}

# NeMo Gym environment names -> (rewardprof environment, option defaults under the entry's own
# options). docs/environments.md has the table: fields read, what differs.
ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "math_with_judge": ("math", {}),  # the judge is off unless options.judge is set
    "polymath": ("math", {}),
    "mcqa": ("mcq", {"grading_mode": "strict_single_letter_boxed"}),
    "ifbench": (
        "instruction_following",
        {"grading_mode": "fraction", "check_errors": "not_followed"},
    ),
}


@cache
def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_environments() -> list[str]:
    return sorted(set(BUILTIN) | set(_plugins()) | set(ALIASES))


def get_environment_class(name: str) -> type[Environment]:
    name = ALIASES[name][0] if name in ALIASES and name not in BUILTIN else name
    if name in BUILTIN:
        module, _, attr = BUILTIN[name].partition(":")
        cls = getattr(importlib.import_module(module), attr)
    elif name in _plugins():
        cls = _plugins()[name].load()
    else:
        raise KeyError(f"unknown environment {name!r}; known: {', '.join(known_environments())}")
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise TypeError(f"environment {name!r} does not subclass rewardprof Environment")
    return cls


def make_environment(name: str, options: dict[str, Any] | None = None) -> Environment:
    """The environment `name` with its options (a pydantic ValidationError if they are bad;
    a config's options were already checked by `validate_config`)."""
    if name in ALIASES and name not in BUILTIN:
        defaults = ALIASES[name][1]
        if isinstance(options, EnvironmentOptions):
            options = options.model_dump(exclude_unset=True)
        options = {**defaults, **(options or {})}
    return get_environment_class(name)(options)


__all__ = [
    "ALIASES",
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Environment",
    "EnvironmentOptions",
    "RowError",
    "Verdict",
    "VerifyContext",
    "extract_messages",
    "get_environment_class",
    "known_environments",
    "make_environment",
]
