"""Environments that act: the model calls tools over several turns and the whole episode is
verified once.

An acting environment adds to `prompt` and `verify` what an episode needs: the tools it offers
(`tools(row)`, chat-completions definitions), the state an episode starts from
(`seed_state(row)`, one per episode, as NeMo Gym's `/seed_session` seeds one per session), and
`call(name, arguments, state) -> (output, state)`, one tool call. `call` is a plain function
of its arguments: it runs in a verification worker (never on the rollout client's event loop),
so the state travels by value and comes back with the output. `verify_episode` scores the
finished trajectory. The loop that drives them is `rewardprof.environments.episode`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rewardprof.core.errors import RewardprofError
from rewardprof.environments.base import Environment, OptionsT, RowError, Verdict, VerifyContext
from rewardprof.environments.episode_limits import EpisodeLimits
from rewardprof.environments.options import EpisodeOptions

# What a NeMo Gym resource server answers for a tool it has no endpoint for (FastAPI's 404
# body): the model called a tool that does not exist, and that is part of its episode.
NOT_FOUND_OUTPUT = '{"detail":"Not Found"}'  # as FastAPI writes it


class ToolFailure(RewardprofError):
    """A tool that could not run (its own fault, not the model's): the episode ends as the
    infrastructure failure `tool_error`, never as a reward."""


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: its id (echoed in the tool message), the tool's name and
    the arguments exactly as the model wrote them (JSON text, possibly invalid)."""

    id: str
    name: str
    arguments: str


@dataclass
class ToolResult:
    """A call's output text as the next prompt carries it; `error` names the policy's own
    mistake (`unknown_tool`, `bad_arguments`) when the call could not be made as asked."""

    call: ToolCall
    output: str
    error: str | None = None


@dataclass
class Turn:
    """One model turn and what its calls returned."""

    content: str | None
    calls: list[ToolCall]
    results: list[ToolResult]
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    seed: int


@dataclass
class Episode:
    """A finished episode: the messages the model saw and wrote, its turns, why it stopped."""

    messages: list[dict[str, Any]]
    turns: list[Turn] = field(default_factory=list)
    stop_reason: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    # how many of `messages` are the prompt (a row may carry an earlier exchange with calls)
    prompt_messages: int = 0

    @property
    def calls(self) -> list[ToolCall]:
        return [c for t in self.turns for c in t.calls]

    @property
    def final_text(self) -> str:
        return next((t.content or "" for t in reversed(self.turns) if t.content), "")

    def summary(self) -> dict[str, Any]:
        """The per-episode figures a rollout record carries (profile columns read them)."""
        return {
            "steps": len(self.turns),
            "tool_calls": len(self.calls),
            "tool_errors": sum(1 for t in self.turns for r in t.results if r.error),
            "stop_reason": self.stop_reason,
            "prompt_messages": self.prompt_messages,
            "prompt_tokens": sum(t.prompt_tokens for t in self.turns),
            "completion_tokens": sum(t.completion_tokens for t in self.turns),
        }


def chat_tools(responses_tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses-API tool definitions (NeMo Gym rows: `{"type": "function", "name", ...}`) as
    chat-completions tools (`{"type": "function", "function": {...}}`); chat ones pass as
    they are. RowError for anything else."""
    out = []
    for i, tool in enumerate(responses_tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise RowError(f"responses_create_params.tools[{i}]: expected a function tool")
        if isinstance(tool.get("function"), dict):
            out.append({"type": "function", "function": tool["function"]})
            continue
        if not isinstance(tool.get("name"), str):
            raise RowError(f"responses_create_params.tools[{i}]: no name")
        function = {"name": tool["name"], "description": tool.get("description") or ""}
        function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
        if isinstance(tool.get("strict"), bool):  # the engine then holds arguments to the schema
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def parse_arguments(call: ToolCall) -> dict[str, Any] | None:
    """The call's arguments as a JSON object, or None when the model wrote something else."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


TOOL_CHOICES = ("auto", "required", "none")


class ActingEnvironment(Environment[OptionsT]):
    """Base class of an environment that acts (see the module's docstring)."""

    acts: ClassVar[bool] = True
    # Whether one turn's calls may run at the same time: False where a call reads what an
    # earlier call of the same turn wrote (a counter); they then run in the model's order.
    concurrent_calls: ClassVar[bool] = False

    def limits(self) -> EpisodeLimits:
        """The episode bounds of this entry's options (EpisodeOptions' fields)."""
        o = self.options
        if not isinstance(o, EpisodeOptions):
            return EpisodeLimits()
        return EpisodeLimits(
            o.max_steps, o.max_total_tokens, o.max_tool_output_chars, o.max_trajectory_chars
        )

    def call_timeout_s(self) -> float | None:
        """The hard limit of one tool call in the verification pool (None: the rollout's
        verify_timeout_s); a tool with its own longer clock says so here."""
        return None

    def tool_choice(self, row: dict[str, Any]) -> str:
        """The row's own responses_create_params.tool_choice when it names a mode, else the
        entry's option (NeMo Gym sends the row's create parameters with every turn)."""
        rcp = row.get("responses_create_params")
        choice = rcp.get("tool_choice") if isinstance(rcp, dict) else None
        if choice in TOOL_CHOICES:
            return choice
        return getattr(self.options, "tool_choice", "auto")

    def tools(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The chat-completions tools of this row (default: the row's own Responses-API ones)."""
        rcp = row.get("responses_create_params")
        tools = rcp.get("tools") if isinstance(rcp, dict) else None
        if not tools:
            raise RowError("no tools: expected responses_create_params.tools")
        return chat_tools(tools)

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        self.tools(row)

    def seed_state(self, row: dict[str, Any]) -> dict[str, Any]:
        """The state one episode starts from (a fresh copy per episode)."""
        return {}

    async def start_episode(self, row: dict[str, Any], ctx: VerifyContext) -> dict[str, Any]:
        """The state one episode starts from: `seed_state` (local and cheap); an environment
        whose state lives elsewhere (a remote server's session) awaits it here. Raise
        ToolFailure when it cannot be had."""
        return self.seed_state(row)

    async def run_tool(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any], ctx: VerifyContext
    ) -> tuple[str, dict[str, Any]]:
        """One call, never on the client's event loop: `call` in the verification pool. An
        environment whose tools run elsewhere awaits them here instead; it raises as `call`
        does, or TimeoutError."""
        return await ctx.run_in_pool(
            self.call, name, arguments, state, timeout_s=self.call_timeout_s()
        )

    def call(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:  # pragma: no cover - abstract
        """One tool call: its output text and the state after it. Raise KeyError for a tool
        this environment does not have, ValueError for arguments it cannot take, ToolFailure
        when the tool itself broke."""
        raise NotImplementedError

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:  # pragma: no cover - abstract
        raise NotImplementedError

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        return Verdict.failure(
            "verifier_error", f"environment {self.name!r} verifies episodes, not one completion"
        )
