"""The config a run used, kept in its run directory: results/<run>/config/<name>.json.

Each stage reads one file that holds only the config sections it depends on (STAGE_SECTIONS).
A local rule writes the file from the validated config and Snakemake tracks its text, so the
rule reruns, and with it the stage, only when those sections change: a new
`profile.pass_at_k` reruns the profile, not the rollouts. `full.json` is the whole config, kept
for the record. The commands stay short: a path instead of the config as JSON text.

Secrets are not written: API keys are never part of the config (`api_key_env` names a
variable), every value a `base_url` got from `${NAME}` is written back as `${NAME}`, and the
user:password of every `base_url` (the engine's, a judge's) is masked in the files. The jobs get
the masked URLs from $REWARDPROF_URL_CREDENTIALS (`secret_env`, set by the workflow for its
jobs; `rewardprof.core.redaction`), which `load_stage_config` puts back, and each `${NAME}` from
their environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rewardprof.core.atomic import atomic_path
from rewardprof.core.config import Config
from rewardprof.core.redaction import (
    URL_CREDENTIALS_ENV,
    masked_urls,
    refuse_written_passwords,
    unmask_urls,
)
from rewardprof.manifest.load import read_config_file, validate_config

# The top-level sections each file holds besides `run` and `entries` (None: all of them).
STAGE_SECTIONS: dict[str, tuple[str, ...] | None] = {
    "materialize": (),
    "rollout": ("sampling", "engine", "rollout"),
    "profile": ("profile",),
    "export": ("profile", "export"),
    "full": None,
}


def stage_config_data(cfg: Config, name: str) -> dict[str, Any]:
    """The sections of config file `name`, with every URL's user:password masked."""
    if name not in STAGE_SECTIONS:
        raise ValueError(f"no config file {name!r}; one of {', '.join(STAGE_SECTIONS)}")
    data = cfg.model_dump(mode="json")
    sections = STAGE_SECTIONS[name]
    if name == "rollout" and cfg.adaptive.mode != "off":
        # adaptive sampling plans its rounds with the keep rules: then they are rollout config
        # too (only then: with adaptive off, a new export rule must not rerun the rollouts)
        sections = (*sections, "adaptive", "profile", "export")
    if sections is not None:
        keep = {"run", "entries", *sections}
        data = {k: v for k, v in data.items() if k in keep}
    return masked_urls(data)[0]


def stage_config_text(cfg: Config, name: str) -> str:
    """The text of results/<run>/config/<name>.json (stable: sorted keys)."""
    return json.dumps(stage_config_data(cfg, name), indent=1, sort_keys=True) + "\n"


def secret_env(cfg: Config) -> dict[str, str]:
    """Environment variables the jobs need for what the files do not hold."""
    real = masked_urls(cfg.model_dump(mode="json"))[1]
    return {URL_CREDENTIALS_ENV: json.dumps(real, sort_keys=True)} if real else {}


def load_stage_config(path: str | Path) -> Config:
    """A config file of the run directory (or any YAML/JSON config) with the masked
    user:password of its URLs restored from $REWARDPROF_URL_CREDENTIALS, then validated (each
    `${NAME}` read from the environment again); a password written into the file is refused."""
    data = read_config_file(path)
    cfg = validate_config(unmask_urls(data, origin=str(path)), origin=str(path))
    refuse_written_passwords(data, origin=str(path))
    return cfg


def write_stage_config(path: str | Path, text: str, log_path: str | Path) -> None:
    """Write a config file of the run directory whole or not at all; say so in its log."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    sections = sorted(json.loads(text))
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(log_path).write_text(f"wrote {path}: {', '.join(sections)}\n")
