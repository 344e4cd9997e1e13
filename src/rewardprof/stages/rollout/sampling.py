"""The seam every kind of rollout plugs into: a `UnitSampler` samples one request unit (a task's
consecutive rollout indices) and hands each finished record on as soon as it is final. One
completion request with n samples (completions.py) and one episode per rollout (episodes.py) are
its two kinds today; the runner (runner.py) picks one per environment."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rewardprof.engine.client import ChatClient
from rewardprof.environments import VerifyContext
from rewardprof.stages.rollout.records import RecordAssembly
from rewardprof.stages.rollout.request_bodies import RequestBuilder
from rewardprof.stages.rollout.shard_tasks import Unit

Keep = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class SamplingTools:
    """What every sampler of a shard's job uses: the engine's client, the requests, the records,
    the verifiers' context (their worker pool, their timeout)."""

    client: ChatClient
    requests: RequestBuilder
    records: RecordAssembly
    verify_ctx: VerifyContext


class UnitSampler(Protocol):
    async def sample(self, unit: Unit, keep: Keep) -> str | None:
        """Sample and verify every rollout of `unit`, each record to `keep` once it is final
        (the journal first); the engine's last error, if any, for the progress line."""
        ...
