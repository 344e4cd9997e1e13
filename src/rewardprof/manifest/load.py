"""A config read and checked whole: `validate_config` (the Config model, then each entry's
environment and options against that environment's `Options`) and `load_config` (a YAML or
JSON file). Every command, the Snakefile and the stage config files come through here."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rewardprof.core import extras
from rewardprof.core.config import Config, ConfigError, Entry, GeneratorSource
from rewardprof.core.limits import MAX_CONFIG_DEPTH, config_problem
from rewardprof.core.redaction import config_secrets, redact, refuse_written_passwords
from rewardprof.core.validation import describe_all
from rewardprof.environments import get_environment_class, known_environments
from rewardprof.store.earlier_profile import EARLIER_COLUMNS

# a generator source (core/config.py GeneratorSource) -> the package that generates its tasks
GENERATOR_PACKAGES = {"reasoning_gym": "reasoning_gym"}


def validate_config(data: dict[str, Any], origin: str = "config") -> Config:
    """Validate a config dict; raise ConfigError with one line per problem found."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the config must be a mapping, got {type(data).__name__}")
    # before anything walks, copies or validates it (the secrets' search below included: it
    # walked a 10^7-value anchor bomb whole, 36 s of CPU): an anchor bomb or a 3,000-deep
    # value. The message names a key path and a limit, no value, so it needs no redaction.
    if (problem := config_problem(data)) is not None:
        raise ConfigError(f"{origin}: {problem}")
    try:
        return _validated(data, origin)
    except ConfigError as exc:
        # the message quotes bad values: never a key or a URL password the config names
        raise ConfigError(redact(str(exc), tuple(config_secrets(data)))) from None


def _validated(data: dict[str, Any], origin: str) -> Config:
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        # A dict given for `source` also fails the union's path (string) branch; that half is
        # noise next to the generator branch's specific errors.
        errors = [
            e
            for e in exc.errors()
            if not (e["type"] == "string_type" and isinstance(e.get("input"), dict))
        ] or exc.errors()
        raise ConfigError(f"{origin}: " + describe_all(errors, Config)) from None
    known = known_environments()
    problems = []
    for i, e in enumerate(cfg.entries):
        if e.environment not in known:
            close = difflib.get_close_matches(e.environment, known, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(sorted(known))}"
            raise ConfigError(
                f"{origin}: entries[{i}].environment: unknown environment {e.environment!r}; {hint}"
            )
        problems += _options_problems(i, e)
    if problems:
        raise ConfigError(f"{origin}: " + "; ".join(problems))
    for i, e in enumerate(cfg.entries):
        _check_packages(i, e)
        # only where the config says how it is served: a run directory's materialize, profile
        # and export files leave the engine out, and the workflow's config always has one
        if "engine" in data:
            _check_tool_calling(cfg, i, e, origin)
    if cfg.adaptive.warm_start:
        check_warm_start(cfg.adaptive.warm_start, origin)
    return cfg


def check_warm_start(path: str, origin: str) -> None:
    """ConfigError (one line) unless `path` is a Parquet file with a profile's columns."""
    import pyarrow.parquet as pq  # lazy: only a warm-started run reads Parquet here

    where = f"{origin}: adaptive.warm_start: {path}"
    want = "give an earlier run's results/<run>/profile/tasks.parquet"
    try:
        names = set(pq.read_schema(path).names)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file; {want}") from None
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(f"{where}: not a Parquet file ({type(exc).__name__}); {want}") from None
    missing = [c for c in EARLIER_COLUMNS if c not in names]
    if missing:
        raise ConfigError(f"{where}: no column(s) {', '.join(missing)}; {want}")


def _check_packages(i: int, entry: Entry) -> None:
    """MissingPackage (one line naming the extra) when entry i's environment or generator
    needs a package of an extra that is not installed."""
    env = get_environment_class(entry.environment)
    where = f"entries[{i}] ({entry.label})"
    extras.check(env.requires, f"{where}: environment {env.name!r}", env.requires_extra)
    if isinstance(entry.source, GeneratorSource):
        generator = entry.source.generator
        package = GENERATOR_PACKAGES[generator]
        extras.check((package,), f"{where}: source generator {generator!r}", "environments")


def _check_tool_calling(cfg: Config, i: int, entry: Entry, origin: str) -> None:
    """An entry that acts, served by rewardprof's own vLLM, needs its tool-call parser: without
    --enable-auto-tool-choice vLLM answers every turn with text and no episode ever acts."""
    acts = getattr(get_environment_class(entry.environment), "acts", False)
    if acts and cfg.engine.mode == "serve" and cfg.engine.tool_call_parser is None:
        raise ConfigError(
            f"{origin}: entries[{i}] ({entry.label}): environment {entry.environment!r} calls "
            "tools; set engine.tool_call_parser to the model's vLLM tool-call parser (e.g. hermes)"
        )


def _options_problems(i: int, entry: Entry) -> list[str]:
    """What is wrong with entry i's `options`, checked against its environment's Options."""
    try:
        model = get_environment_class(entry.environment).Options
    except (ImportError, AttributeError, TypeError) as exc:  # a plugin that does not load
        return [
            f"entries[{i}].environment: environment {entry.environment!r} cannot be loaded: "
            f"{type(exc).__name__}: {exc}"
        ]
    try:
        model.model_validate(entry.options)
    except ValidationError as exc:
        return [describe_all(exc.errors(), model, prefix=f"entries[{i}].options")]
    return []


# How deep the YAML reader goes before it gives up: above the config's own limit, so that a
# value nested a little too deep gets config_problem's message naming where it is.
MAX_READ_DEPTH = 5 * MAX_CONFIG_DEPTH


class _TooDeep(Exception):
    """A YAML node nested deeper than MAX_READ_DEPTH."""


class _DepthBoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that stops at the first node nested deeper than MAX_READ_DEPTH,
    while reading: without it, 3,000 nested brackets cost PyYAML's scanner ~20 s of CPU
    before the recursion limit ended it."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_READ_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_config_text(text: str, origin: str, json_text: bool = False) -> Any:
    """A config file's YAML or JSON value; ConfigError (one line) when it is not valid, or
    nested so deep the reader gives up."""
    try:
        if json_text:
            return json.loads(text)
        return yaml.load(text, Loader=_DepthBoundedLoader)  # noqa: S506  # a SafeLoader
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{origin}: not valid YAML/JSON: {str(exc).splitlines()[0]}") from None
    except (RecursionError, _TooDeep):
        raise ConfigError(
            f"{origin}: nested too deep to read (at most {MAX_CONFIG_DEPTH} levels)"
        ) from None


def load_config(path: str | Path) -> Config:
    """Load a YAML or JSON config file and validate it; a URL password written into the file
    is refused (the file may reach a Snakemake report), `${NAME}` is read from the environment."""
    data = read_config_file(path)
    cfg = validate_config(data, origin=str(path))
    refuse_written_passwords(data, origin=str(path))
    return cfg


def parse_config_json(text: str) -> Any:
    """The config given as JSON text (`--config-json`), read as a config file's is: one-line
    errors, and the limits checked before anything walks it (the URLs' unmasking does)."""
    return _within_limits(parse_config_text(text, "--config-json", json_text=True), "--config-json")


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON config file's mapping, not validated (an empty file is `{}`)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{p}: config file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a text file (a YAML or JSON config expected)") from None
    data = parse_config_text(text, str(p), json_text=p.suffix == ".json") or {}
    return _within_limits(data, str(p))


def _within_limits(data: Any, origin: str) -> Any:
    """`data` as read, or ConfigError where it is too deep or too big: checked here, before
    any caller walks it (an overlay's password check walked an anchor bomb whole)."""
    if isinstance(data, dict) and (problem := config_problem(data)) is not None:
        raise ConfigError(f"{origin}: {problem}")
    return data


def overlay(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged onto `base` as Snakemake merges a `--configfile` onto the Snakefile's
    `configfile:` (a mapping merges key by key, recursively; anything else, lists included,
    replaces)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = overlay(out[key], value)
        else:
            out[key] = value
    return out


def load_overlaid(base: str | Path, overlays: list[str | Path]) -> Config:
    """The config Snakemake runs with `--configfile A B ...`: each file merged onto `base`
    (config/config.yaml, the Snakefile's `configfile:`), then validated as a whole."""
    data = read_config_file(base)
    for path in overlays:
        layer = read_config_file(path)
        if not isinstance(layer, dict):
            raise ConfigError(f"{path}: the config must be a mapping, got {type(layer).__name__}")
        refuse_written_passwords(layer, origin=str(path))
        data = overlay(data, layer) if isinstance(data, dict) else layer
    origin = " + ".join(str(p) for p in [base, *overlays])
    cfg = validate_config(data, origin=origin)
    refuse_written_passwords(data, origin=origin)
    return cfg
