"""The endpoint preflight in process (the Snakefile's onstart and `rewardprof rollout` use it):
one line naming the URL, never the key, and a URL's user:password masked."""

from __future__ import annotations

import socket

import pytest
from harness import shardkit as kit

from rewardprof.core.config import ConfigError
from rewardprof.engine.preflight import EndpointUnavailable, check_endpoint, public_url
from rewardprof.engine.session import engine_session
from rewardprof.testing.fake_server import FakeOpenAI


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_down_endpoint_named_with_credentials_masked():
    port = _closed_port()
    cfg = kit.make_config(f"http://alice:hunter2@127.0.0.1:{port}/v1")
    with pytest.raises(EndpointUnavailable) as exc:
        check_endpoint(cfg, timeout_s=5)
    assert str(exc.value) == (
        f"engine.base_url: http://***@127.0.0.1:{port}/v1/models is not "
        f"reachable ([Errno 111] Connection refused); start the server or "
        f"fix engine.base_url"
    )


def test_rejected_key_names_the_variable_not_the_key(monkeypatch):
    monkeypatch.setenv("RP_TEST_KEY", "sk-SENTINEL-preflight")
    with FakeOpenAI(api_key="sk-right", echo_key=True) as server:
        cfg = kit.make_config(server.base_url, engine={"api_key_env": "RP_TEST_KEY"})
        with pytest.raises(EndpointUnavailable) as exc:
            check_endpoint(cfg)
        assert server.stats["auth_failed"] == 1
    assert str(exc.value) == (
        f"engine.base_url: {server.base_url}/models rejected the API key "
        f"from $RP_TEST_KEY (HTTP 401)"
    )


def test_unset_key_variable():
    with FakeOpenAI() as server:
        cfg = kit.make_config(server.base_url, engine={"api_key_env": "RP_TEST_UNSET_VAR"})
        with pytest.raises(
            ConfigError,
            match="^engine.api_key_env: environment variable RP_TEST_UNSET_VAR is not set$",
        ):
            check_endpoint(cfg)


def test_model_not_served_and_ok_case():
    with FakeOpenAI(model="served-one") as server:
        with pytest.raises(
            EndpointUnavailable,
            match="does not serve model 'fake-model' "
            r"\(it serves: served-one\)",
        ):
            check_endpoint(kit.make_config(server.base_url))
        good = kit.make_config(server.base_url, engine={"model": "served-one"})
        check_endpoint(good)
        with engine_session(good) as endpoint:  # the rollout job's own check passes too
            assert endpoint.identity == f"endpoint:{server.base_url}"
        assert server.stats["requests"] == 0  # GET /models only, no chat request


def test_public_url():
    assert public_url("https://u:p@h.example:8443/v1") == "https://***@h.example:8443/v1"
    assert public_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
