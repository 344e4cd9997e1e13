"""Every secret the config names, and the one path that keeps them out of what rewardprof writes.

The config holds no key itself: it names environment variables (`engine.api_key_env`, a judge's
`api_key_env` in an entry's options) whose values are keys. A URL may carry `user:password@`
(`engine.base_url`, a judge's `base_url`). `config_secrets` collects all of them from a config;
`install` makes them the process's secrets, and `redact` replaces each (also as JSON escapes
it, as a URL percent-decodes it, and a URL's `user:password` decoded and as the base64 that
HTTP Basic auth sends) with [REDACTED]; it also masks the value of any Authorization header,
`Basic …` or `Bearer …` credential quoted in a text, whether or not it is a known secret.
`redact` is the one path for everything written or printed: every string field of a rollout
record (store/record.py), the HTTP clients' error details (engine/http_retry.py), every log
line (`RedactingFilter`, installed by cli.py), the error lines cli.py prints, the rollout
jobs' status files (stages/rollout/heartbeat.py) and `rewardprof status`.

Every value expanded from `${NAME}` in a URL is a secret wherever it stood (core/config_types.py
records each expansion in EXPANDED_URL_VARIABLES, below): `config_secrets` includes them, and
credentials read from elsewhere (an endpoints file) join with `install_url_secrets`. A user
name alone (`https://TOKEN@host/v1`) is a credential too.

Secrets must not reach Snakemake at all (a rule's params end up in its printed command and in
.snakemake/metadata): `masked_urls` gives the config a rule passes on, each URL written back as
`${NAME}` where a variable gave it and its `user:password@` masked, and
$REWARDPROF_URL_CREDENTIALS carries the masked URLs (in that `${NAME}` form) to the job, which
`unmask_urls` puts back before validating (cli.py, when a stage reads its config).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

from rewardprof.core.errors import ConfigError

# `${NAME}` in a URL: that environment variable's value (core/config_types.py's HttpUrl)
URL_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Every `${NAME}` this process expanded in a URL: {the value as the URL holds it: NAME}. Each
# value is a secret wherever it appears (masked here, and written back as `${NAME}` in place of
# it in the run's config files), whichever part of the URL it stood in. Here rather than beside
# HttpUrl: every rewardprof command installs the redaction, and only some need the config models.
EXPANDED_URL_VARIABLES: dict[str, str] = {}

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
    `api_key_env` names (where set), the credentials of every `base_url` (`url_secrets`), the
    value of every `${NAME}` in one, and every value this process expanded from `${NAME}`
    (`expanded_secrets`: once validated, a URL no longer says which part came from a variable)."""
    found: set[str] = expanded_secrets()
    for _, key, value in _walk(data):
        if not isinstance(value, str):
            continue
        if key == "api_key_env" and os.environ.get(value):
            found.add(os.environ[value])
    for _, key, value in _walk(data):
        for url in _url_strings(key, value):
            found |= url_secrets(url)
            for name in URL_VARIABLE.findall(url):
                if os.environ.get(name):
                    found |= {os.environ[name], urllib.parse.quote(os.environ[name], safe="")}
    return sorted((s for s in found if len(s) >= _MIN_LENGTH), key=len, reverse=True)


def expanded_secrets() -> set[str]:
    """Every value this process expanded from `${NAME}` in a URL, as the URL holds it
    (percent-encoded) and decoded: secrets wherever they stood (a path, a query, a user)."""
    quoted = set(EXPANDED_URL_VARIABLES)
    return quoted | {urllib.parse.unquote(v) for v in quoted}


def url_secrets(url: str) -> set[str]:
    """The credentials of a URL: with a password, `user:password` (as written, decoded and as
    HTTP Basic auth's base64) and the password; with a user name alone (a token given as the
    user, `https://TOKEN@host/v1`), the user name in the same forms."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not a URL: nothing to take from it (validation names the key)
        return set()
    userinfo = parts.netloc.rpartition("@")[0]
    if parts.password:
        found = {userinfo, parts.password, urllib.parse.unquote(parts.password)}
        return found | set(basic_auth_forms(parts.username or "", parts.password))
    if parts.username:
        found = {userinfo, urllib.parse.unquote(userinfo)}
        return found | set(basic_auth_forms(parts.username, parts.password or ""))
    return set()


def install_url_secrets(urls: list[str]) -> None:
    """Make the credentials of `urls` secrets of this process (URLs read from a file the config
    does not hold, such as an endpoints file)."""
    found: set[str] = set()
    for url in urls:
        found |= url_secrets(url)
    install(sorted(found))


def basic_auth_forms(username: str, password: str) -> tuple[str, str]:
    """A URL's user and password as HTTP Basic auth carries them: `user:password` decoded, and
    its base64 (the Authorization header's value, as aiohttp builds it from the URL)."""
    pair = f"{urllib.parse.unquote(username)}:{urllib.parse.unquote(password)}"
    return pair, base64.b64encode(pair.encode("latin-1", "replace")).decode("ascii")


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


# A credential quoted in a text: an Authorization header's value (JSON, Python repr or HTTP
# form), or a `Basic <base64>` / `Bearer <token>` anywhere. Masked whether or not the secret is
# known to this process (`rewardprof status` reads files and knows none).
_HEADER_VALUE = re.compile(
    r"""(?i)(authorization['"]?\s*[:=]\s*['"]?)((?:basic|bearer)\s+)?[^\s'",;}]+"""
)
_SCHEME_VALUE = re.compile(r"(?i)\b(basic|bearer)(\s+)([A-Za-z0-9+/=._~-]{8,})")


def _credential(match: re.Match[str]) -> str:
    """A `Basic`/`Bearer` match masked when it is a credential, not prose ("a basic example"):
    Basic's base64 decodes to `user:password`; a bearer token has a digit and 16+ characters."""
    scheme, space, value = match.groups()
    if scheme.lower() == "basic":
        try:
            is_secret = b":" in base64.b64decode(value, validate=True)
        except ValueError:
            is_secret = False
    else:
        is_secret = len(value) >= 16 and any(c.isdigit() for c in value)
    return scheme + space + MASK if is_secret else match.group(0)


def redact(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """`text` with every installed secret, and each of `secrets`, replaced by [REDACTED], and
    any quoted Authorization header value or Basic/Bearer credential masked."""
    for secret in _active + (_forms(list(secrets)) if secrets else ()):
        if secret in text:
            text = text.replace(secret, MASK)
    if "uthori" in text or "asic" in text or "earer" in text:
        text = _HEADER_VALUE.sub(lambda m: m.group(1) + (m.group(2) or "") + MASK, text)
        text = _SCHEME_VALUE.sub(_credential, text)
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


def variable_form(url: str) -> str:
    """`url` with each value this process expanded from `${NAME}` written back as `${NAME}`:
    the text the user wrote, which expands to `url` again (a value is percent-encoded in the
    URL, so no `${` is left to confuse the two). Values too short to be secrets stay."""
    for value in sorted(EXPANDED_URL_VARIABLES, key=len, reverse=True):
        if len(value) >= _MIN_LENGTH and value in url:
            url = url.replace(value, "${" + EXPANDED_URL_VARIABLES[value] + "}")
    return url


def masked_urls(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of the config dict with each `base_url` in its `variable_form` and its
    user:password masked, and {masked: variable form} for the URLs that had one. Neither holds
    a value expanded from `${NAME}`: a job expands them again from its environment."""
    masked = json.loads(json.dumps(data))
    real: dict[str, str] = {}
    for holder in _urls(masked):
        urls = [variable_form(u) if isinstance(u, str) else u for u in _as_list(holder["base_url"])]
        shown = [public_url(u) if isinstance(u, str) else u for u in urls]
        for url, public in zip(urls, shown, strict=True):
            if public != url:
                real[public] = url
        holder["base_url"] = shown if isinstance(holder["base_url"], list) else shown[0]
    return masked, real


def _as_list(urls: Any) -> list[Any]:
    return urls if isinstance(urls, list) else [urls]


def unmask_urls(data: dict[str, Any], origin: str = "config") -> dict[str, Any]:
    """The config dict with each masked `base_url` restored from $REWARDPROF_URL_CREDENTIALS,
    before it is validated (which expands the `${NAME}` the restored URL may hold)."""
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
