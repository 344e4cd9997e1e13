"""Procedural task sources: an entry's `source` may be a generator spec instead of a file.

`generate_rows(GeneratorSource)` yields rows one at a time, in NeMo Gym form (the prompt under
`responses_create_params.input`) plus the fields the matching environment verifies with. The same
(task, size, seed, config) always yields the same rows, so no dataset is downloaded and a rerun
materializes the same tasks.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import json
import math
import os
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import ConfigError, GeneratorSource
from rewardprof.core.extras import require  # the optional package, imported when used (~2 s)


class GeneratorError(ConfigError):
    """A generator spec that cannot produce tasks (unknown task, bad config)."""


def json_safe(value: Any) -> Any:
    """Metadata as plain JSON: tuples and sets become lists, other objects their str()."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v) for v in value), key=repr)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    return str(value)


def _import_reasoning_gym():
    return require("reasoning_gym", "source generator 'reasoning_gym'", "environments")


def _reasoning_gym_rows(src: GeneratorSource) -> Iterator[dict[str, Any]]:
    reasoning_gym = _import_reasoning_gym()
    from rewardprof.environments.reasoning_gym import (  # lazy: with reasoning_gym
        ANSWER_INSTRUCTION,
    )

    check_generator(src)
    try:
        dataset = reasoning_gym.create_dataset(src.task, size=src.size, seed=src.seed, **src.config)
    except (TypeError, ValueError, AssertionError) as exc:
        raise GeneratorError(f"reasoning_gym {src.task}: bad config {src.config}: {exc}") from None
    for i in range(src.size):
        item = dataset[i]
        meta = json_safe(item.get("metadata") or {})
        meta.setdefault("source_dataset", src.task)
        row = {
            "responses_create_params": {
                "input": [
                    {"role": "user", "content": f"{item['question']}\n\n{ANSWER_INSTRUCTION}"}
                ],
            },
            "question": item["question"],
            "answer": json_safe(item.get("answer")),
            "task": src.task,
            "metadata": meta,
        }
        json.dumps(row)  # every row must survive the tasks table's JSON column
        yield row


GENERATORS = {"reasoning_gym": _reasoning_gym_rows}


def _task_names(generator: str) -> list[str]:
    if generator == "reasoning_gym":
        return _reasoning_gym_task_names()
    raise GeneratorError(f"unknown generator {generator!r}; known: {', '.join(GENERATORS)}")


def _reasoning_gym_task_names() -> list[str]:
    """reasoning-gym's dataset names, from a cache file when this install was listed before.

    Listing them means importing reasoning_gym, which imports every dataset module (matplotlib
    among them): ~1 s of CPU, paid by every Snakemake command that reads a config naming it
    (dry runs, --summary, --report) before any job runs."""
    cache = _task_names_cache()
    if cache is None:
        return _listed_task_names()
    with contextlib.suppress(OSError, ValueError):  # absent or damaged: listed again below
        names = json.loads(cache.read_text())
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            return names
    names = _listed_task_names()
    # the cache only saves time: an unwritable cache directory costs the import next time
    with contextlib.suppress(OSError):
        write_json_atomic(cache, names)
    return names


def _task_names_cache() -> Path | None:
    """The cache file of this install's names, in the user's cache directory, keyed by the
    package's version and the time its __init__.py was written (an upgrade or an edited checkout
    is listed afresh); None where there is no key or no home (not installed: the listing's
    import says which extra)."""
    spec = importlib.util.find_spec("reasoning_gym")  # finds the package without running it
    if spec is None or spec.origin is None:
        return None
    try:
        key = f"{metadata.version('reasoning_gym')}-{os.stat(spec.origin).st_mtime_ns}"
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    except (metadata.PackageNotFoundError, OSError, RuntimeError):  # no metadata, no home
        return None
    return Path(base) / "rewardprof" / f"reasoning-gym-tasks-{key}.json"


def _listed_task_names() -> list[str]:
    return sorted(_import_reasoning_gym().factory.DATASETS)


def check_generator(source: GeneratorSource, where: str = "source") -> None:
    """GeneratorError naming `<where>.task` unless the generator has that task; the message
    suggests the nearest name (a dry run and `rewardprof validate` call this)."""
    names = _task_names(source.generator)
    if source.task in names:
        return
    close = difflib.get_close_matches(source.task, names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"known tasks: {', '.join(names[:20])}, ..."
    raise GeneratorError(f"{where}.task: unknown {source.generator} task {source.task!r}; {hint}")


def generate_rows(source: GeneratorSource) -> Iterator[dict[str, Any]]:
    """Yield the rows of a generator source, one at a time."""
    try:
        gen = GENERATORS[source.generator]
    except KeyError:
        raise GeneratorError(f"unknown generator {source.generator!r}") from None
    yield from gen(source)
