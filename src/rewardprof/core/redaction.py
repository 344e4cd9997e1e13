"""Every secret the config names, and the one path that keeps them out of what rewardprof writes.

The config holds no key itself: it names environment variables (`engine.api_key_env`, a judge's
`api_key_env` in an entry's options) whose values are keys. A URL may carry `user:password@`
(`engine.base_url`, a judge's `base_url`). `config_secrets` collects all of them from a config;
`install` makes them the process's secrets, and `redact` replaces each (also as JSON escapes
it and as a URL percent-decodes it) with [REDACTED]. `redact` is applied to every string field
of a rollout record (store/record.py), to every log line (`RedactingFilter`, installed
by cli.py) and to the error lines cli.py prints.

URL passwords must not reach Snakemake at all (a rule's params end up in its printed command
and in .snakemake/metadata): `masked_urls` gives the config a rule passes on, each URL's
`user:password@` masked, and `url_credentials_env` the variable that carries the real URLs to the
job, which `unmask_urls` puts back (cli.py, when a stage reads its config).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from collections.abc import Iterator
from typing import Any

from rewardprof.core.config_types import URL_VARIABLE
from rewardprof.core.errors import ConfigError

MASK = "[REDACTED]"
# Carries {masked URL: real URL} from the Snakemake process to the jobs it starts (they inherit
# its environment; a Slurm job's Snakemake parses the Snakefile and sets it again).
URL_CREDENTIALS_ENV = "REWARDPROF_URL_CREDENTIALS"
_MIN_LENGTH = 4  # shorter values would mask common words; no real key or password is this short

_active: tuple[str, ...] = ()


def public_url(url: str) -> str:
    """The URL with any user:password masked (safe for logs, records and Snakemake)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host}"))


# A config about to be refused may be a YAML anchor bomb (core/limits.py): the walk for its
# secrets stops after this many values instead of expanding it, and never recurses.
_WALK_MAX_VALUES = 1_000_000
_WALK_MAX_DEPTH = 64


def _walk(data: Any) -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every mapping entry in nested dicts and lists, the path written
    as the error messages name keys (`entries[1].options.base_url`; bounded: see above)."""
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    seen = 0
    while stack and seen < _WALK_MAX_VALUES:
        item, depth, path = stack.pop()
        seen += 1
        if depth >= _WALK_MAX_DEPTH:
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                at = f"{path}.{k}" if path else str(k)
                yield at, str(k), v
                stack.append((v, depth + 1, at))
        elif isinstance(item, list):
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(item))


def _url_strings(key: str, value: Any) -> list[str]:
    """The URLs of a `base_url` entry: one string, or a list of them (engine replicas)."""
    if key != "base_url":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def config_secrets(data: dict[str, Any]) -> list[str]:
    """The secret values a config (as a dict) names: the value of every variable an
    `api_key_env` names (where set), and the userinfo and password of every `base_url`."""
    found: set[str] = set()
    for _, key, value in _walk(data):
        if not isinstance(value, str):
            continue
        if key == "api_key_env" and os.environ.get(value):
            found.add(os.environ[value])
    for _, key, value in _walk(data):
        for url in _url_strings(key, value):
            parts = urllib.parse.urlsplit(url)
            if parts.password:
                userinfo = parts.netloc.rpartition("@")[0]
                found |= {userinfo, parts.password, urllib.parse.unquote(parts.password)}
    return sorted((s for s in found if len(s) >= _MIN_LENGTH), key=len, reverse=True)


def refuse_written_passwords(data: Any, origin: str = "config") -> None:
    """Refuse a config in which a `base_url`'s password is written out rather than named as
    `${NAME}`: Snakemake copies config files whole into `snakemake --report` and keeps the
    `--config` values in .snakemake/, where no masking reaches. (The run directory's config
    files hold the mask, `***@`, which has no password.)"""
    for path, key, value in _walk(data):
        for url in _url_strings(key, value):
            _refuse_password(path, url, origin)


def _refuse_password(path: str, url: str, origin: str) -> None:
    try:
        password = urllib.parse.urlsplit(url).password or ""
    except ValueError:  # not a URL: the config's validation names the key
        return
    if URL_VARIABLE.sub("", password):
        raise ConfigError(
            f"{origin}: {path}: the URL's password is written into the config, and "
            f"Snakemake copies config files into its report and .snakemake/; write it as "
            f"${{NAME}} (e.g. https://user:${{MY_PASSWORD}}@host/v1) and export NAME"
        )


def install(secrets: list[str]) -> None:
    """Add `secrets` to what `redact` masks in this process."""
    global _active
    _active = tuple(sorted(set(_active) | set(_forms(secrets)), key=len, reverse=True))


def _forms(secrets: list[str]) -> tuple[str, ...]:
    """Each secret as written and as JSON text holds it, the longest first (no half-masking)."""
    forms: set[str] = set()
    for secret in secrets:
        if len(secret) >= _MIN_LENGTH:
            forms |= {
                secret,
                json.dumps(secret, ensure_ascii=False)[1:-1],
                json.dumps(secret)[1:-1],
            }
    return tuple(sorted(forms, key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """`text` with every installed secret (or each of `secrets`) replaced by [REDACTED]."""
    for secret in _active if secrets is None else _forms(list(secrets)):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactingFilter(logging.Filter):
    """Masks the installed secrets in every log record that passes a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _active:
            message = record.getMessage()
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, None
        return True


def _urls(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every mapping of `data` that has a string `base_url`."""
    if isinstance(data, dict):
        if _url_strings("base_url", data.get("base_url")):
            yield data
        for v in data.values():
            yield from _urls(v)
    elif isinstance(data, list):
        for v in data:
            yield from _urls(v)


def masked_urls(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of the config dict with each `base_url`'s user:password masked, and
    {masked: real} for the URLs that had one."""
    masked = json.loads(json.dumps(data))
    real: dict[str, str] = {}
    for holder in _urls(masked):
        urls = holder["base_url"]
        shown = [public_url(u) if isinstance(u, str) else u for u in _as_list(urls)]
        for url, public in zip(_as_list(urls), shown, strict=True):
            if public != url:
                real[public] = url
        holder["base_url"] = shown if isinstance(urls, list) else shown[0]
    return masked, real


def _as_list(urls: Any) -> list[Any]:
    return urls if isinstance(urls, list) else [urls]


def unmask_urls(data: dict[str, Any], origin: str = "config") -> dict[str, Any]:
    """The config dict with each masked `base_url` restored from $REWARDPROF_URL_CREDENTIALS."""
    masked = [
        h for h in _urls(data) if any("***@" in u for u in _url_strings("base_url", h["base_url"]))
    ]
    if not masked:
        return data
    try:
        real = json.loads(os.environ.get(URL_CREDENTIALS_ENV) or "{}")
    except ValueError:
        real = {}
    data = json.loads(json.dumps(data))

    def restored(url: Any) -> Any:
        if not isinstance(url, str) or "***@" not in url:
            return url
        if url not in real:
            raise ConfigError(
                f"{origin}: base_url {url}: its user:password was masked and "
                f"${URL_CREDENTIALS_ENV} does not hold it; run the stage through snakemake, "
                f"or give the config with the full URL"
            )
        return real[url]

    for holder in _urls(data):
        urls = holder["base_url"]
        holder["base_url"] = (
            [restored(u) for u in urls] if isinstance(urls, list) else restored(urls)
        )
    return data
