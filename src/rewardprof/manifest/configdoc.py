"""docs/config.md is rendered from the pydantic models (the config's, and each built-in
environment's `Options`), so the reference cannot drift from them
(`rewardprof schema --markdown > docs/config.md`; a test compares the two)."""

from __future__ import annotations

import sys
import types
import typing
from typing import Any

from pydantic import BaseModel

from rewardprof.core.config import (
    Adaptive,
    Config,
    Engine,
    Entry,
    Export,
    Fleet,
    GeneratorSource,
    Profile,
    Rollout,
    Sampling,
)
from rewardprof.environments import BUILTIN, get_environment_class

SECTIONS: list[tuple[str, type[BaseModel], str]] = [
    ("top level", Config, "The run as a whole."),
    ("entries[]", Entry, "One per environment dataset; their order fixes task_index offsets."),
    (
        "entries[].source (generator)",
        GeneratorSource,
        "Instead of a file path, tasks generated procedurally.",
    ),
    ("sampling", Sampling, "Sent with every request."),
    ("engine", Engine, "Where rollouts are generated (docs/engine.md)."),
    ("rollout", Rollout, "The rollout client: concurrency, timeouts, retries, journal."),
    ("profile", Profile, "Statistics of the profile stage."),
    ("export", Export, "The filtered, re-weighted training set (docs/profile.md)."),
    ("adaptive", Adaptive, "Stop sampling a settled task (docs/adaptive.md)."),
    ("fleet", Fleet, "A shared engine fleet for a sweep (`rewardprof fleet`, docs/engine.md)."),
]


def environment_sections() -> list[tuple[str, type[BaseModel], str]]:
    """A section per built-in environment's Options, and per model nested in one."""
    out = []
    for name in BUILTIN:
        env = get_environment_class(name)
        doc = (sys.modules[env.__module__].__doc__ or "").split("\n\n")[0]
        out.append((f"entries[].options ({name})", env.Options, " ".join(doc.split())))
        for key, field in env.Options.model_fields.items():
            for sub in typing.get_args(field.annotation):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    blurb = " ".join((sub.__doc__ or "").split())
                    out.append((f"entries[].options.{key} ({name})", sub, blurb))
    return out


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
        return "`" + repr(value) + "`" if not isinstance(value, BaseModel) else "(section)"
    return f"`{field.default!r}`" if field.default is not None else "`null`"


def _type(field: Any) -> str:
    ann = field.annotation
    args = typing.get_args(ann)
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _name(a) for a in args)
    return _name(ann)


def _name(ann: Any) -> str:
    if typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    if typing.get_origin(ann) is typing.Literal:
        return " / ".join(repr(a) for a in typing.get_args(ann))
    if typing.get_origin(ann) is list:
        return f"list of {_name(typing.get_args(ann)[0])}"
    if typing.get_origin(ann) is dict:
        return "mapping"
    return getattr(ann, "__name__", str(ann))


def render_markdown() -> str:
    out = [
        "# Config reference",
        "",
        "Generated from `rewardprof.core.config` and each built-in environment's `Options` model",
        "(`rewardprof schema --markdown`); the JSON schema of the config is `rewardprof schema`.",
        "Unknown keys, also in an entry's `options`, are rejected with the nearest valid key.",
        'Values are never converted: `num_repeats: "4"` or `num_repeats: true` is an error naming',
        "the key (an int is accepted where a float is expected).",
        "",
    ]
    # the options of each environment follow the entries' own keys
    sections = [*SECTIONS[:3], *environment_sections(), *SECTIONS[3:]]
    for title, model, blurb in sections:
        out += [
            f"## {title}",
            "",
            blurb,
            "",
            "| key | type | default | meaning |",
            "|---|---|---|---|",
        ]
        for name, field in model.model_fields.items():
            desc = " ".join((field.description or "").split()).replace("|", "\\|")
            typ = _type(field).replace("|", "\\|")
            default = _default(field).replace("|", "\\|")
            out.append(f"| `{name}` | {typ} | {default} | {desc} |")
        out.append("")
    return "\n".join(out)
