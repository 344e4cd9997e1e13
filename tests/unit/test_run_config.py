"""results/<run>/config/<name>.json: the sections each stage reads, secrets masked, read back
by the stage with the masked part restored from the environment."""

from __future__ import annotations

import json

import pytest

from rewardprof.core.config import ConfigError
from rewardprof.core.redaction import URL_CREDENTIALS_ENV
from rewardprof.manifest.load import validate_config
from rewardprof.manifest.run_config import (
    STAGE_SECTIONS,
    load_stage_config,
    secret_env,
    stage_config_text,
)

URL = "http://user:s3cret@10.0.0.5:8000/v1"


def _cfg(**over):
    data = {
        "run": "r",
        "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
        "engine": {"mode": "endpoint", "base_url": URL, "model": "policy"},
        "profile": {"pass_at_k": [1, 2]},
        **over,
    }
    return validate_config(data)


def test_each_file_holds_the_sections_its_stage_reads():
    cfg = _cfg()
    keys = {name: set(json.loads(stage_config_text(cfg, name))) for name in STAGE_SECTIONS}
    assert keys["materialize"] == {"run", "entries"}
    assert keys["rollout"] == {"run", "entries", "sampling", "engine", "rollout"}
    assert keys["profile"] == {"run", "entries", "profile"}
    assert keys["export"] == {"run", "entries", "profile", "export"}
    assert keys["full"] == set(cfg.model_dump())
    # a profile key does not touch the rollout file: its stage is not rerun
    other = _cfg(profile={"pass_at_k": [1, 4]})
    assert stage_config_text(other, "rollout") == stage_config_text(cfg, "rollout")
    assert stage_config_text(other, "profile") != stage_config_text(cfg, "profile")


def test_no_file_holds_the_password_and_the_stage_gets_it_back(tmp_path, monkeypatch):
    cfg = _cfg()
    path = tmp_path / "rollout.json"
    path.write_text(stage_config_text(cfg, "rollout"))
    assert "s3cret" not in path.read_text() and "user" not in path.read_text()
    env = secret_env(cfg)
    assert env == {URL_CREDENTIALS_ENV: json.dumps({"http://***@10.0.0.5:8000/v1": URL})}
    monkeypatch.setenv(URL_CREDENTIALS_ENV, env[URL_CREDENTIALS_ENV])
    assert load_stage_config(path).engine.base_url == URL
    back = load_stage_config(path).model_dump(mode="json")
    for section in ("run", "entries", "sampling", "engine", "rollout"):
        assert back[section] == cfg.model_dump(mode="json")[section], section


def test_a_masked_url_without_the_variable_is_one_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "rollout.json"
    path.write_text(stage_config_text(_cfg(), "rollout"))
    monkeypatch.delenv(URL_CREDENTIALS_ENV, raising=False)
    with pytest.raises(ConfigError, match="rollout.json: base_url .* masked"):
        load_stage_config(path)
    other = {"http://***@10.9.9.9:1/v1": "http://other:pw@10.9.9.9:1/v1"}  # not this file's URL
    monkeypatch.setenv(URL_CREDENTIALS_ENV, json.dumps(other))
    with pytest.raises(ConfigError, match="masked"):
        load_stage_config(path)


def test_a_url_without_password_needs_no_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(URL_CREDENTIALS_ENV, raising=False)
    cfg = _cfg(engine={"mode": "endpoint", "base_url": "http://10.0.0.5:8000/v1", "model": "p"})
    assert secret_env(cfg) == {}
    path = tmp_path / "rollout.json"
    path.write_text(stage_config_text(cfg, "rollout"))
    assert load_stage_config(path).engine.base_url == "http://10.0.0.5:8000/v1"
