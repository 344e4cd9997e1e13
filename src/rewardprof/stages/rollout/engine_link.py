"""A rollout job's way to the engine it opened: one HTTP session and its chat client, the
endpoint's liveness (a job stops after `rollout.endpoint_down_s` of connection errors only) and,
with several replicas, the balancer over them, watching the fleet while the job runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp

from rewardprof.core.config import Config
from rewardprof.engine.balancer import make_balancer
from rewardprof.engine.client import ChatClient
from rewardprof.engine.http_retry import client_session
from rewardprof.engine.liveness import EndpointLiveness
from rewardprof.engine.session import Endpoint


class EngineLink:
    """The link to `endpoint` under the run's `rollout:` settings."""

    def __init__(self, cfg: Config, endpoint: Endpoint):
        self._rollout, self._endpoint = cfg.rollout, endpoint
        self.liveness = EndpointLiveness(cfg.rollout.endpoint_down_s)
        self.balancer = make_balancer(cfg, endpoint)
        # several replicas: their caps bound the connections (the worker pool follows them)
        limit = cfg.rollout.concurrency if self.balancer is None else 0
        self._connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)

    def admission(self) -> int:
        """How many sequences the replicas admit now (0: a single endpoint, no balancer)."""
        return self.balancer.admission() if self.balancer is not None else 0

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[ChatClient]:
        """The chat client on one session; with replicas, the balancer started before the
        first request and watching them until the session closes."""
        probing = None
        async with client_session(self._connector) as session:
            client = ChatClient(
                session,
                self._endpoint.base_url,
                self._endpoint.api_key,
                self._rollout,
                liveness=self.liveness,
                balancer=self.balancer,
            )
            try:
                if self.balancer is not None:
                    # the jobs on the fleet and the replicas' queues known before the first
                    # request: a share taken before that is taken blind (engine/sharing.py)
                    await self.balancer.start(session)
                    probing = asyncio.ensure_future(self.balancer.watch(session))
                yield client
            finally:
                if probing is not None:
                    probing.cancel()
                    # awaited before the session closes: a probe cut short is not a dead replica
                    await asyncio.gather(probing, return_exceptions=True)
