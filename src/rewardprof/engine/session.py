"""Where the rollout client sends its requests: an existing endpoint, or a server we start.

`engine_session(cfg, log_path)` is the one entry point: a context manager yielding an Endpoint.
Endpoint mode yields the configured base URL; serve mode starts vLLM inside the job (see
rewardprof.engine.server), waits until it serves the expected model, and stops it on exit, on
failure and on SIGTERM. If the server dies mid-run the session raises EngineError carrying the
server's last log lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rewardprof.core.config import Config
from rewardprof.core.redaction import public_url
from rewardprof.engine.multinode import serve_nodes
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


@contextmanager
def engine_session(cfg: Config, log_path: str | Path | None = None) -> Iterator[Endpoint]:
    if cfg.engine.mode == "endpoint":
        assert cfg.engine.base_url is not None
        check_endpoint(cfg)  # down, wrong key or wrong model: one line naming the URL, now
        # the identity is recorded on every rollout: never with a URL's user:password
        yield Endpoint(
            cfg.engine.base_url,
            cfg.model_name,
            api_key_from_env(cfg),
            identity=f"endpoint:{public_url(cfg.engine.base_url)}",
        )
        return
    if cfg.engine.nodes > 1 or cfg.engine.replicas > 1:
        with serve_nodes(cfg, log_path or "engine-multinode.log") as nodes:
            if len(nodes.base_urls) > 1:
                raise EngineError("engine.replicas > 1 needs the balancing client (endpoints)")
            yield Endpoint(nodes.base_urls[0], cfg.model_name, None, identity=nodes.identity)
        return
    with serve(cfg, log_path) as server:
        yield Endpoint(server.base_url, cfg.model_name, None, identity=server.identity)
