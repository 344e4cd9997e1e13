"""Rollouts of environments that act: one episode per (task_index, rollout_index), journaled
once, whole, when it has finished (a killed episode leaves nothing and starts again from its
first turn on resume: never half-recorded, never duplicated).

The episode's turns go to the engine through the shard's own client, one sample per turn,
with the turn's seed (`rewardprof.environments.episode.turn_seed`) and the row's tools; the
record holds the final text, the tokens of every turn, and in `extras` the verifier's extras,
the episode's figures (`episode`: steps, tool calls, tool errors, stop reason) and its
trajectory (the chat messages, bounded by EpisodeLimits). `EpisodeSampler` is the
`UnitSampler` (sampling.py) of such environments: a unit's episodes run side by side.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from typing import Any

from rewardprof.core.kinds import OK, FailureKind
from rewardprof.engine.client import Affinity, ChatClient
from rewardprof.environments.acting import ActingEnvironment, ToolCall
from rewardprof.environments.base import Verdict, VerifyContext
from rewardprof.environments.episode import (
    ChatFn,
    ChatReply,
    EpisodeFailure,
    EpisodeLimits,
    run_episode,
)
from rewardprof.stages.rollout.sampling import Keep, SamplingTools
from rewardprof.stages.rollout.shard_tasks import Unit

BodyFn = Callable[[list[dict[str, Any]], int, int], dict[str, Any]]


def engine_chat(client: ChatClient, body_for: BodyFn, tool_choice: str = "auto") -> ChatFn:
    """One episode's chat function on the shard's client: one sample per turn, every turn to
    the replica that answered the one before (its prefix cache holds the episode so far); a
    turn the engine could not answer ends the episode with the request's failure kind."""
    affinity = Affinity()

    async def chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int):
        body = dict(body_for(messages, 1, seed), tools=tools, tool_choice=tool_choice)
        result = await client.complete(body, affinity)
        if not result.choices:
            kind = result.failure or FailureKind.ENGINE_ERROR
            raise EpisodeFailure(kind, result.detail or "the engine returned no choice")
        choice = result.choices[0]
        return ChatReply(
            content=choice.text or None,
            tool_calls=[ToolCall(*call) for call in choice.tool_calls],
            finish_reason=choice.finish_reason,
            prompt_tokens=result.prompt_tokens or 0,
            completion_tokens=choice.completion_tokens or 0,
        )

    return chat


async def _verdict(env: ActingEnvironment, row: dict, episode, ctx: VerifyContext) -> Verdict:
    try:
        verdict = await env.verify_episode(row, episode, ctx)
    except TimeoutError:
        return Verdict.failure(FailureKind.VERIFIER_TIMEOUT, "episode verification timed out")
    except Exception as exc:  # a verifier bug is this rollout's failure, not the shard's
        return Verdict.failure(FailureKind.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}"[:300])
    if verdict.status == OK and (verdict.reward is None or not math.isfinite(verdict.reward)):
        return Verdict.failure(
            FailureKind.VERIFIER_ERROR,
            f"environment {env.name!r} returned ok without a finite reward ({verdict.reward})",
        )
    return verdict


async def episode_fields(
    env: ActingEnvironment,
    row: dict[str, Any],
    messages: list[dict[str, Any]],
    seed: int,
    chat: ChatFn,
    ctx: VerifyContext,
    limits: EpisodeLimits,
) -> dict[str, Any]:
    """The rollout record's fields of one episode, run to its end and verified."""
    try:
        episode = await run_episode(chat, env, row, messages, seed, ctx, limits)
    except EpisodeFailure as exc:
        return {"status": exc.kind, "error": str(exc)[:300], "finished_at": time.time()}
    t0 = time.monotonic()
    verdict = await _verdict(env, row, episode, ctx)
    summary = episode.summary()
    extras = {**verdict.extras, "episode": summary, "trajectory": episode.messages}
    return {
        "status": verdict.status,
        "reward": verdict.reward,
        "error": verdict.detail,
        "finish_reason": episode.turns[-1].finish_reason,
        "completion": episode.final_text,
        "prompt_tokens": summary["prompt_tokens"],
        "completion_tokens": summary["completion_tokens"],
        "extras": json.dumps(extras, ensure_ascii=False, default=str),
        "verify_s": time.monotonic() - t0,
        "finished_at": time.time(),
    }


class EpisodeSampler:
    """The `UnitSampler` of an environment that acts: an episode per rollout of the unit, side
    by side, each journaled whole once every one of them has finished."""

    def __init__(self, env: ActingEnvironment, tools: SamplingTools):
        self._env, self._tools = env, tools

    async def sample(self, unit: Unit, keep: Keep) -> str | None:
        env, tools = self._env, self._tools
        prompt = tools.requests.prompt(unit.pos)
        choice, limits = env.tool_choice(prompt.row), env.limits()
        started = time.time()
        runs = (  # a chat function per episode: its turns share a replica
            episode_fields(
                env,
                prompt.row,
                prompt.messages,
                prompt.seed(r),
                engine_chat(tools.client, tools.requests.body, choice),
                tools.verify_ctx,
                limits,
            )
            for r in unit.indices
        )
        done = await asyncio.gather(*runs)
        request = tools.records.request(
            unit.pos, attempt=1, request_n=1, started_at=started, latency_s=time.time() - started
        )
        for r, fields in zip(unit.indices, done, strict=True):
            rollout = tools.records.rollout(request, r, prompt.seed(r))
            keep(tools.records.episode(rollout, fields))
        return None  # each turn's error is in its episode's record
