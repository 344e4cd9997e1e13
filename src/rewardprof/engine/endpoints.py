"""The replicas of one model a rollout job talks to: a list of base URLs, or a file of them.

`engine.base_url` may be one URL or a list; `engine.endpoints_file` names a JSON file

    {"endpoints": ["http://host:port/v1", ...], "capacity": {"http://host:port/v1": 64, ...}}

(`capacity`, optional: a replica's slots, its `--max-num-seqs`; else engine.replica_capacity)
that a fleet (`rewardprof fleet`, tools/fleet.py) rewrites atomically as replicas turn healthy
or die. `EndpointsFile.poll()` re-reads it when its mtime or size changed, so a running job
follows the fleet. A file that is missing or half-written by a foreign tool reads as "no
change" while a job runs (the last good list stays); at the start of a job it is an error
naming the file. Credentials in the file's URLs join the redaction set when it is read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import Config, ConfigError
from rewardprof.core.redaction import install_url_secrets, public_url
from rewardprof.engine.preflight import EndpointUnavailable, check_replica


class EndpointsFileError(ConfigError):
    """The endpoints file is missing or not `{"endpoints": [URL, ...]}`; names the file."""


def parse_endpoints(data: Any, origin: str) -> list[str]:
    """The URLs of an endpoints document, in order, without duplicates and trailing slashes."""
    if not isinstance(data, dict) or not isinstance(data.get("endpoints"), list):
        raise EndpointsFileError(
            f'{origin}: expected {{"endpoints": ["http://host:port/v1", ...]}}, '
            f"got {type(data).__name__}"
        )
    urls: list[str] = []
    for i, url in enumerate(data["endpoints"]):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise EndpointsFileError(
                f"{origin}: endpoints[{i}]: {_shown(url)!r} is not an http:// or https:// URL"
            )
        url = url.rstrip("/")
        if url not in urls:
            urls.append(url)
    return urls


def _shown(value: Any) -> Any:
    """A value of the file as an error may quote it: a URL's credentials masked."""
    if not isinstance(value, str):
        return value
    try:
        return public_url(value)
    except ValueError:  # not even a URL (a bad port): said without its text
        return "(not a URL)"


def parse_capacities(data: Any, origin: str) -> dict[str, int]:
    """The document's per-replica capacities ({} without a `capacity` map)."""
    caps = data.get("capacity") if isinstance(data, dict) else None
    if caps is None:
        return {}
    if not isinstance(caps, dict):
        raise EndpointsFileError(f'{origin}: capacity: expected {{"URL": slots, ...}}')
    out = {}
    for url, n in caps.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise EndpointsFileError(
                f"{origin}: capacity[{_shown(url)!r}]: {n!r} is not a positive integer"
            )
        out[str(url).rstrip("/")] = n
    return out


def read_endpoints(path: str | Path) -> list[str]:
    return read_endpoints_file(path)[0]


def read_endpoints_file(path: str | Path) -> tuple[list[str], dict[str, int]]:
    """The file's URLs and per-replica capacities."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise EndpointsFileError(f"{p}: endpoints file not found (is the fleet started?)") from None
    except OSError as exc:
        raise EndpointsFileError(f"{p}: endpoints file unreadable: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise EndpointsFileError(f"{p}: not JSON: {str(exc).splitlines()[0]}") from None
    urls = parse_endpoints(data, str(p))
    # credentials in the file (user:pw@, a token as the user) are this process's secrets from
    # now on: a server quoting them in an error never gets them into a record, status or log
    install_url_secrets(urls)
    return urls, parse_capacities(data, str(p))


def write_endpoints(
    path: str | Path, urls: list[str], capacity: dict[str, int] | None = None, **fields: Any
) -> None:
    """Publish `urls` (temp file, then rename: a reader never sees half a list)."""
    doc = {"endpoints": list(urls), "updated_at": time.time(), **fields}
    if capacity:
        doc["capacity"] = {u: capacity[u] for u in urls if u in capacity}
    write_json_atomic(Path(path), doc)


class EndpointsFile:
    """An endpoints file followed while a job runs."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self.capacities: dict[str, int] = {}  # per replica, as of the last good read

    def poll(self) -> list[str] | None:
        """The file's URLs if it changed since the last poll (None: unchanged or unreadable)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return None
        try:
            urls, self.capacities = read_endpoints_file(self.path)
        except EndpointsFileError:
            return None  # being replaced by a non-atomic writer: keep the last good list
        self._stamp = stamp
        return urls


def static_urls(cfg: Config) -> list[str]:
    """engine.base_url as a list (empty with engine.endpoints_file)."""
    url = cfg.engine.base_url
    if url is None:
        return []
    return [url] if isinstance(url, str) else list(url)


def replica_capacity(cfg: Config) -> int:
    """Sequences in flight per replica: engine.replica_capacity, else serve_args'
    --max-num-seqs, else vLLM's default (256)."""
    if cfg.engine.replica_capacity is not None:
        return cfg.engine.replica_capacity
    args = cfg.engine.serve_args
    for i, arg in enumerate(args):
        if arg.startswith("--max-num-seqs="):
            return int(arg.split("=", 1)[1])
        if arg == "--max-num-seqs" and i + 1 < len(args):
            return int(args[i + 1])
    return 256


def health_url(base_url: str) -> str:
    """The /health URL of a server whose OpenAI base URL is `base_url` (.../v1)."""
    return _root(base_url) + "/health"


def metrics_url(base_url: str) -> str:
    """Its Prometheus /metrics URL (vLLM serves it beside /health)."""
    return _root(base_url) + "/metrics"


def _root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def wait_for_fleet(cfg: Config, poll_s: float = 1.0) -> list[str]:
    """The endpoints file's URLs once one of them serves the model (preflight.check_replica),
    waiting up to engine.startup_timeout_s for the fleet to publish it."""
    path = Path(cfg.engine.endpoints_file or "")
    deadline = time.monotonic() + cfg.engine.startup_timeout_s
    why = ""
    while True:
        try:
            urls = read_endpoints(path)
            why = f"{path}: lists no endpoint yet"
        except EndpointsFileError as exc:
            urls, why = [], str(exc)
        for url in urls:
            try:
                check_replica(cfg, url)
                return urls
            except EndpointUnavailable as exc:
                why = str(exc)
        if time.monotonic() > deadline:
            raise EndpointsFileError(
                f"engine.endpoints_file: no replica ready after "
                f"{cfg.engine.startup_timeout_s:.0f}s (engine.startup_timeout_s): {why}; start "
                f"the fleet (rewardprof fleet start) or check its log"
            )
        time.sleep(poll_s)
