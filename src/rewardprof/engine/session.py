"""Where the rollout client sends its requests: an existing endpoint, or a server we start.

`engine_session(cfg, log_path)` is the one entry point: a context manager yielding an Endpoint.
Endpoint mode yields the configured base URL (or URLs: replicas, balanced by the rollout
client; with engine.endpoints_file it first waits for the fleet to publish one that answers);
serve mode starts vLLM inside the job (see rewardprof.engine.server), waits until it serves the
expected model, and stops it on exit, on failure and on SIGTERM. If the server dies mid-run
the session raises EngineError carrying the server's last log lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rewardprof.core.config import Config
from rewardprof.core.redaction import public_url
from rewardprof.engine.endpoints import static_urls, wait_for_fleet
from rewardprof.engine.preflight import api_key_from_env, check_endpoint
from rewardprof.engine.server import EngineError, serve

__all__ = ["Endpoint", "EngineError", "engine_session"]


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # .../v1
    model: str  # the name sent in requests
    api_key: str | None = None
    identity: str = "endpoint"  # engine id recorded on every rollout (never the key)

    def __repr__(self) -> str:  # keep the key and a URL's password out of logs and tracebacks
        return f"Endpoint(base_url={public_url(self.base_url)!r}, model={self.model!r})"

    urls: tuple[str, ...] = ()  # several replicas of the model (engine/balancer.py)
    endpoints_file: str | None = None  # ... listed in this file, re-read while running

    @property
    def balanced(self) -> bool:
        return len(self.urls) > 1 or self.endpoints_file is not None


@contextmanager
def engine_session(cfg: Config, log_path: str | Path | None = None) -> Iterator[Endpoint]:
    if cfg.engine.mode == "endpoint":
        key = api_key_from_env(cfg)
        if cfg.engine.endpoints_file:
            urls = wait_for_fleet(cfg)
            yield Endpoint(
                urls[0],
                cfg.model_name,
                key,
                identity=f"fleet:{cfg.engine.endpoints_file}",
                urls=tuple(urls),
                endpoints_file=cfg.engine.endpoints_file,
            )
            return
        urls = static_urls(cfg)
        check_endpoint(cfg)  # down, wrong key or wrong model: one line naming the URL, now
        # the identity is recorded on every rollout: never with a URL's user:password
        yield Endpoint(
            urls[0],
            cfg.model_name,
            key,
            identity="endpoint:" + ",".join(public_url(u) for u in urls),
            urls=tuple(urls),
        )
        return
    with serve(cfg, log_path) as server:
        yield Endpoint(server.base_url, cfg.model_name, None, identity=server.identity)
