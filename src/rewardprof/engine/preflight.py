"""Checks of the engine that fail a run before any job starts, with one line naming the key or
URL (the sources' checks: sources/checks.py).

- `check_endpoint(cfg)`: endpoint mode only: the server answers `GET <base_url>/models`, accepts
  the API key, and serves the configured model. The Snakefile runs it in `onstart` (never in a
  dry run) when rollout jobs are due, and `rewardprof rollout` runs it before generating.

Messages never contain the API key, and a URL's user:password part is masked. The key
(`api_key_from_env`) and the masked URL (`public_url`, from rewardprof.core.redaction) are also
what rewardprof.engine.session puts into an Endpoint.
"""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.parse
import urllib.request

from rewardprof.core.config import Config, ConfigError
from rewardprof.core.limits import loads_bounded
from rewardprof.core.redaction import public_url

_MODELS_MAX_BYTES = 8 << 20  # a /v1/models answer; a longer one is not a model list


class EndpointUnavailable(ConfigError):
    """The configured endpoint cannot serve this run; the message names the URL."""


def api_key_from_env(cfg: Config) -> str | None:
    """The API key from the variable engine.api_key_env names (None when it names none)."""
    name = cfg.engine.api_key_env
    if not name:
        return None
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"engine.api_key_env: environment variable {name} is not set")
    return value


def check_endpoint(cfg: Config, timeout_s: float = 10.0) -> None:
    """Raise EndpointUnavailable (or ConfigError for an unset key variable) unless the
    endpoint answers, accepts the key and serves the model. No-op in serve mode and with
    engine.endpoints_file (a fleet may still be starting: the job waits for it). With a list
    of base URLs, one replica that passes is enough (the others are probed while jobs run)."""
    if cfg.engine.mode != "endpoint" or not cfg.engine.base_url:
        return
    urls = cfg.engine.base_url
    problems: list[EndpointUnavailable] = []
    for url in [urls] if isinstance(urls, str) else urls:
        try:
            check_replica(cfg, url, timeout_s)
            return
        except EndpointUnavailable as exc:
            problems.append(exc)
    raise problems[0]


def check_replica(cfg: Config, base_url: str, timeout_s: float = 10.0) -> None:
    """check_endpoint for one base URL."""
    key = api_key_from_env(cfg)
    url = base_url.rstrip("/") + "/models"
    shown = public_url(url)
    headers = {}
    parts = urllib.parse.urlsplit(url)
    if parts.username is not None:  # urllib cannot take user:password from the URL itself
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit(parts._replace(netloc=host))
        userinfo = f"{parts.username}:{parts.password or ''}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(userinfo).decode()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            # read to a bound: an endless body never times out (the timeout is per read)
            raw = resp.read(_MODELS_MAX_BYTES + 1)
            if len(raw) > _MODELS_MAX_BYTES:
                raise ValueError("over the bound")
            payload = loads_bounded(raw.decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            source = (
                f"from ${cfg.engine.api_key_env}"
                if cfg.engine.api_key_env
                else "(none sent: set engine.api_key_env)"
            )
            raise EndpointUnavailable(
                f"engine.base_url: {shown} rejected the API key {source} (HTTP {exc.code})"
            ) from None
        raise EndpointUnavailable(
            f"engine.base_url: {shown} answered HTTP {exc.code}; is "
            f"this an OpenAI-compatible /v1 URL?"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointUnavailable(
            f"engine.base_url: {shown} is not reachable ({reason}); "
            f"start the server or fix engine.base_url"
        ) from None
    except ValueError:  # TooDeep is one
        raise EndpointUnavailable(
            f"engine.base_url: {shown} did not answer JSON; is this an OpenAI-compatible /v1 URL?"
        ) from None
    served = (
        [m.get("id") for m in payload.get("data", []) if isinstance(m, dict)]
        if isinstance(payload, dict)
        else []
    )
    if served and cfg.model_name not in served:
        raise EndpointUnavailable(
            f"engine.base_url: {shown} does not serve model {cfg.model_name!r} (it serves: "
            f"{', '.join(map(str, served[:10]))}); set engine.served_model_name or engine.model"
        )


def endpoint_problem(cfg: Config) -> str | None:
    """check_endpoint as a message (None when fine), for the Snakefile's onstart.
    REWARDPROF_NO_PREFLIGHT=1 skips it (an endpoint only the compute nodes can reach)."""
    if os.environ.get("REWARDPROF_NO_PREFLIGHT", "") not in ("", "0"):
        return None
    try:
        check_endpoint(cfg)
    except ConfigError as exc:
        return str(exc)
    return None
