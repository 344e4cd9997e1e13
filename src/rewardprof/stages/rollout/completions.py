"""Rollouts of environments that verify text: one chat-completions request for a unit's n
samples, each sample verified and journaled in turn; a sample the engine did not return is a
failure of the request's kind."""

from __future__ import annotations

import time

from rewardprof.core.kinds import FailureKind
from rewardprof.environments import Environment
from rewardprof.stages.rollout.sampling import Keep, SamplingTools
from rewardprof.stages.rollout.shard_tasks import Unit
from rewardprof.stages.rollout.verifying import verify


class CompletionSampler:
    """The `UnitSampler` (sampling.py) of an environment that verifies one completion."""

    def __init__(self, env: Environment, tools: SamplingTools):
        self._env, self._tools = env, tools

    async def sample(self, unit: Unit, keep: Keep) -> str | None:
        tools, records = self._tools, self._tools.records
        prompt = tools.requests.prompt(unit.pos)
        started = time.time()
        body = tools.requests.body(prompt.messages, len(unit.indices), prompt.seed(unit.indices[0]))
        result = await tools.client.complete(body)
        request = records.request(
            unit.pos,
            attempt=result.attempts,
            request_n=len(unit.indices),
            started_at=started,
            latency_s=result.latency_s,
            prompt_tokens=result.prompt_tokens,
        )
        got = {c.index: c for c in result.choices}
        for j, r in enumerate(unit.indices):
            rollout = records.rollout(request, r, prompt.seed(r))
            choice = got.get(j)
            if choice is None:
                kind = result.failure or FailureKind.ENGINE_ERROR
                keep(records.failed(rollout, kind, result.detail))
                continue
            t0 = time.monotonic()
            verdict = await verify(self._env, prompt.row, choice.text, tools.verify_ctx)
            keep(records.sampled(rollout, choice, verdict, time.monotonic() - t0))
        return result.detail
