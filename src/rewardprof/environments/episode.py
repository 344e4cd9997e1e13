"""The agent loop: one rollout of an acting environment, as NeMo Gym's simple agent runs it.

model turn -> the turn's tool calls -> their outputs appended -> next turn, until a turn makes
no call, `max_steps` turns, or the token budget; then one verdict for the whole episode. The
engine is any async `chat(messages, tools, seed) -> ChatReply` (the rollout stage passes its
OpenAI-compatible client), so the loop knows no engine and is tested with a scripted one.

What the model does wrong is part of its episode and scored (a call to a tool that does not
exist, arguments that are not a JSON object, running out of steps); what breaks outside the
model (a tool that fails or hangs) ends the episode as a typed failure, never as a reward.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rewardprof.core.errors import RewardprofError
from rewardprof.environments.acting import (
    NOT_FOUND_OUTPUT,
    ActingEnvironment,
    Episode,
    ToolCall,
    ToolFailure,
    ToolResult,
    Turn,
    parse_arguments,
)
from rewardprof.environments.base import VerifyContext
from rewardprof.environments.episode_limits import EpisodeLimits


class EpisodeFailure(RewardprofError):
    """An episode that ended without a verdict; `kind` is the rollout record's status."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


@dataclass
class ChatReply:
    """One model turn as the engine answered it."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0


# how an episode ends: a turn with no call, the turn limit, the token budget, a turn cut short
STOP_REASONS = ("no_call", "max_steps", "token_budget", "length")

ChatFn = Callable[[list[dict[str, Any]], list[dict[str, Any]], int], Awaitable[ChatReply]]


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of turn `turn` (0-based) of the rollout seeded `seed`: the rollout's
    own seed for the first turn, a hash of both after it; same config, same trajectory."""
    if turn == 0:
        return seed
    digest = hashlib.blake2b(f"{seed}:{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # vLLM takes a signed 64-bit seed


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters cut by rewardprof]"


async def _one_call(
    env: ActingEnvironment,
    call: ToolCall,
    state: dict[str, Any],
    known: set[str],
    ctx: VerifyContext,
) -> tuple[ToolResult, dict[str, Any]]:
    if call.name not in known:
        return ToolResult(call, NOT_FOUND_OUTPUT, "unknown_tool"), state
    arguments = parse_arguments(call)
    if arguments is None:
        detail = json.dumps({"detail": "arguments are not a JSON object"})
        return ToolResult(call, detail, "bad_arguments"), state
    try:
        output, new_state = await env.run_tool(call.name, arguments, state, ctx)
    except KeyError:
        return ToolResult(call, NOT_FOUND_OUTPUT, "unknown_tool"), state
    except (ValueError, TypeError) as exc:
        return ToolResult(call, json.dumps({"detail": str(exc)}), "bad_arguments"), state
    except ToolFailure as exc:
        raise EpisodeFailure("tool_error", f"tool {call.name!r} failed: {exc}") from exc
    except TimeoutError as exc:
        raise EpisodeFailure("tool_timeout", f"tool {call.name!r} timed out") from exc
    return ToolResult(call, output, None), new_state


async def run_calls(
    env: ActingEnvironment,
    calls: list[ToolCall],
    state: dict[str, Any],
    known: set[str],
    ctx: VerifyContext,
) -> tuple[list[ToolResult], dict[str, Any]]:
    """One turn's calls: at the same time where the environment's calls share no state, else
    in the model's order, each seeing the state the one before it left."""
    if env.concurrent_calls:
        done = await asyncio.gather(*(_one_call(env, c, state, known, ctx) for c in calls))
        return [result for result, _ in done], state
    results = []
    for call in calls:
        result, state = await _one_call(env, call, state, known, ctx)
        results.append(result)
    return results, state


def _assistant_message(reply: ChatReply) -> dict[str, Any]:
    # "" rather than null: chat templates that know no tools concatenate the content
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or ""}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return message


async def run_episode(
    chat: ChatFn,
    env: ActingEnvironment,
    row: dict[str, Any],
    messages: list[dict[str, Any]],
    seed: int,
    ctx: VerifyContext,
    limits: EpisodeLimits | None = None,
) -> Episode:
    """Run one episode to its end (see the module's docstring); EpisodeFailure when it cannot
    finish for a reason outside the model."""
    limits = limits or EpisodeLimits()
    tools = env.tools(row)
    known = {t["function"]["name"] for t in tools}
    try:
        state = await env.start_episode(row, ctx)
    except ToolFailure as exc:
        raise EpisodeFailure("tool_error", f"the episode could not start: {exc}") from exc
    episode = Episode(
        messages=[dict(m) for m in messages], state=state, prompt_messages=len(messages)
    )
    tokens = 0
    for step in range(limits.max_steps):
        reply = await chat(episode.messages, tools, turn_seed(seed, step))
        tokens += reply.completion_tokens
        episode.messages.append(_assistant_message(reply))
        results, episode.state = await run_calls(env, reply.tool_calls, episode.state, known, ctx)
        for r in results:
            r.output = _bounded(r.output, limits.max_tool_output_chars)
            episode.messages.append(
                {"role": "tool", "tool_call_id": r.call.id, "content": r.output}
            )
        episode.turns.append(
            Turn(
                reply.content,
                list(reply.tool_calls),
                results,
                reply.finish_reason,
                reply.prompt_tokens,
                reply.completion_tokens,
                turn_seed(seed, step),
            )
        )
        size = len(json.dumps(episode.messages))
        if size > limits.max_trajectory_chars:
            raise EpisodeFailure(
                "trajectory_too_large",
                f"{size} characters after turn {step + 1} (limit {limits.max_trajectory_chars})",
            )
        if not reply.tool_calls:
            episode.stop_reason = "length" if reply.finish_reason == "length" else "no_call"
            return episode
        if tokens >= limits.max_total_tokens:
            episode.stop_reason = "token_budget"
            return episode
    episode.stop_reason = "max_steps"
    return episode
