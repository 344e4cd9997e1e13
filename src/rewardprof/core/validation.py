"""One line per pydantic validation error, naming the key (`entries[2].options.timeout_s: ...`),
for the config and for each entry's environment options.

Built on pydantic's stable error fields (`type`, `loc`, `ctx`, `input`), not on the wording of
its messages; the branch names pydantic puts into `loc` for a union field are found by walking
the model's own annotations and left out.
"""

from __future__ import annotations

import difflib
import reprlib
import types
import typing
from typing import Any

from pydantic import BaseModel


def _unwrap(ann: Any) -> list[Any]:
    """The alternatives of an annotation: Annotated unwrapped, None dropped."""
    if typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return [a for arg in typing.get_args(ann) if arg is not type(None) for a in _unwrap(arg)]
    return [ann]


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def _step(node: Any, part: str | int) -> Any:
    """The annotation one `loc` part below `node` (None when unknown)."""
    if isinstance(part, int):
        return typing.get_args(node)[0] if typing.get_origin(node) is list else None
    if _is_model(node):
        field = node.model_fields.get(part)
        return field.annotation if field is not None else None
    if typing.get_origin(node) is dict:
        return typing.get_args(node)[1]
    return None


def _walk(loc: tuple, root: type[BaseModel]) -> tuple[str, Any]:
    """The user's path to `loc` (union branch names left out) and the annotation there."""
    path, node = "", root
    for part in loc:
        options = _unwrap(node)
        if len(options) > 1:  # a union: pydantic names the branch it tried before the key
            branch = next((o for o in options if getattr(o, "__name__", None) == part), None)
            if branch is not None or not any(_step(o, part) for o in options):
                node = branch
                continue
            node = next(o for o in options if _step(o, part))
        elif options:
            node = options[0]
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
        node = _step(node, part)
    found = _unwrap(node)
    return path, found[0] if len(found) == 1 else None


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 80, 80


def _shown(value: Any) -> str:
    # bounded: a whole repr of a YAML anchor bomb would never end
    text = _REPR.repr(value)
    return text if len(text) <= 80 else text[:76] + " ..."


def describe(err: dict[str, Any], root: type[BaseModel], prefix: str = "") -> str:
    """One error of `root.model_validate` as one line; `prefix` is where `root` sits."""
    loc = tuple(err["loc"])
    path, _ = _walk(loc, root)
    where = ".".join(p for p in (prefix, path) if p) or "config"
    kind = err["type"]
    if kind == "extra_forbidden":
        _, parent = _walk(loc[:-1], root)
        hint = ""
        if _is_model(parent):
            # 0.7: typos (num_repeat, concurency, entrys) match; unrelated words (colour ->
            # rollout at 0.62) get the list of valid keys instead of a misleading guess
            valid = list(parent.model_fields)
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.7)
            hint = f"; did you mean {close[0]}?" if close else f"; valid keys: {', '.join(valid)}"
        return f"{where}: unknown key{hint}"
    if kind == "missing":
        return f"{where}: required key is missing"
    msg = err["msg"]
    if kind == "value_error":  # raised by one of our validators: its own words
        msg = str((err.get("ctx") or {}).get("error", msg))
        if not loc and not prefix:  # a whole-config check names its keys itself
            return msg
    return f"{where}: {msg} (got {_shown(err.get('input'))})"


def describe_all(errors: list[dict[str, Any]], root: type[BaseModel], prefix: str = "") -> str:
    """Several errors as one line, each problem once."""
    return "; ".join(dict.fromkeys(describe(e, root, prefix) for e in errors))
