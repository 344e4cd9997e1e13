"""What every environment is: a prompt builder and a verifier, behind one small interface.

Adding an environment is one module with one `Environment` subclass and one registration (see
`rewardprof.environments.__init__` and docs/environments.md).
"""

from __future__ import annotations

import asyncio
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from rewardprof.core.errors import RewardprofError
from rewardprof.environments.extract import get_field
from rewardprof.environments.options import EnvironmentOptions


class RowError(RewardprofError, ValueError):
    """A source row this environment cannot use; the message says what is missing."""


@dataclass
class Verdict:
    """The outcome of verifying one completion.

    `status` is "ok" with a reward, or a failure kind (e.g. verifier_error, judge_error) with
    reward None: a verifier that could not decide never produces a silent 0.
    """

    reward: float | None
    status: str = "ok"
    extras: dict[str, Any] = field(default_factory=dict)
    detail: str | None = None

    @classmethod
    def failure(cls, kind: str, detail: str, **extras: Any) -> Verdict:
        return cls(reward=None, status=kind, extras=extras, detail=detail)


class VerifyContext:
    """Services a verifier may use: a process pool with hard timeouts, options, an HTTP session.

    CPU-heavy or untrusted work must go through `run_in_pool` so it never blocks the event loop
    of the rollout client and a wedged call is killed, not waited for.
    """

    def __init__(self, pool: Any = None, timeout_s: float = 30.0, http_session: Any = None):
        self._pool = pool
        self.timeout_s = timeout_s
        self.http_session = http_session

    async def off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Cheap work on model output (extraction, parsing) in a thread, never on the event
        loop: a completion is adversarial, and even a linear scan of a long one is time the
        loop would not spend serving the other requests."""
        return await asyncio.to_thread(fn, *args)

    async def run_in_pool(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None):
        """Run a picklable top-level function in a worker process; TimeoutError past timeout."""
        timeout = timeout_s or self.timeout_s
        if self._pool is None:  # library use without a pool: run inline in a thread
            return await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout)
        future = self._pool.schedule(fn, args=args, timeout=timeout)
        return await asyncio.wrap_future(future)


CHAT_PROMPT_KEYS = ("responses_create_params", "messages", "prompt")


def _blank_or_not_finite(value: Any) -> str | None:
    """Why a required value is unusable: an empty string, or NaN / infinity (Parquet floats,
    or JSON written by Python), else None."""
    if isinstance(value, str) and not value.strip():
        return "empty"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    return None


def has_chat_prompt(row: dict[str, Any]) -> bool:
    """True when the row carries its own prompt messages (else an environment builds them)."""
    return any(k in row for k in CHAT_PROMPT_KEYS)


def require_prompt(row: dict[str, Any], *plain_keys: str) -> None:
    """RowError unless the row has prompt messages or one of the environment's plain keys."""
    if has_chat_prompt(row) or any(k in row for k in plain_keys):
        return
    names = ["responses_create_params.input", "messages", "prompt", *plain_keys]
    raise RowError(f"no prompt: expected {', '.join(names[:-1])} or {names[-1]}")


def extract_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Prompt messages of a row in any of the formats RL teams have.

    NeMo Gym rows: `responses_create_params.input` (a list of messages or a string); plain rows:
    `messages` (a list) or `prompt` (a string, or a list of messages).
    """
    rcp = row.get("responses_create_params")
    if isinstance(rcp, dict) and "input" in rcp:
        return _as_messages(rcp["input"], "responses_create_params.input")
    if "messages" in row:
        return _as_messages(row["messages"], "messages")
    if "prompt" in row:
        return _as_messages(row["prompt"], "prompt")
    raise RowError("no prompt: expected responses_create_params.input, messages or prompt")


def _as_messages(value: Any, key: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        out: list[dict[str, Any]] = []
        for m in value:
            if m.get("type") in _HISTORY_ITEMS:
                _add_history_item(out, m, key)
                continue
            if "role" not in m or "content" not in m:
                raise RowError(f"{key}: every message needs 'role' and 'content'")
            content = m["content"]
            if isinstance(content, list):  # Responses-API parts -> plain text
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            # The Responses API calls the system prompt "developer"; chat templates want "system".
            role = "system" if m["role"] == "developer" else m["role"]
            out.append({"role": role, "content": content})
        return out
    raise RowError(f"{key}: expected a string or a non-empty list of messages")


# Responses-API items of an earlier exchange in a row's input (a conversation cut mid-way):
# reasoning is dropped, calls join the assistant turn, outputs become tool messages.
_HISTORY_ITEMS = ("reasoning", "function_call", "function_call_output")


def _add_history_item(out: list[dict[str, Any]], item: dict[str, Any], key: str) -> None:
    kind = item["type"]
    if kind == "reasoning":
        return
    try:
        if kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
            return
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
    except KeyError as missing:
        raise RowError(f"{key}: a {kind} item needs {missing}") from None
    if not (out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]):
        out.append({"role": "assistant", "content": None, "tool_calls": []})
    out[-1]["tool_calls"].append(call)


def with_example(messages: list[dict[str, Any]], example: list[dict[str, str]]) -> list[dict]:
    """Messages with a worked example exchange (user, assistant) before the task's first user
    turn (after any system message): small models copy the answer format they are shown."""
    i = 0
    while i < len(messages) and messages[i]["role"] == "system":
        i += 1
    return [*messages[:i], *example, *messages[i:]]


OptionsT = TypeVar("OptionsT", bound=EnvironmentOptions)


class Environment(Generic[OptionsT]):
    """Base class. A subclass names its options model once, as the type parameter
    (`class MathEnvironment(Environment[MathOptions])`), sets `name` and `required_fields`, and
    implements `verify`.

    The options model, a pydantic model of the entry's `options:` (see
    `rewardprof.environments.options`), becomes the class's `Options`; it is validated with the
    config, and again when the environment is made (a pydantic ValidationError for a bad
    mapping), into `self.options`.
    `prompt` runs once per task at materialize time (its messages are stored in the tasks
    table); `verify` runs once per rollout inside the rollout job.
    """

    name: ClassVar[str] = ""
    required_fields: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type[EnvironmentOptions]] = EnvironmentOptions
    # Row keys that may stand in for prompt messages: a row has messages or one of these, and
    # `plain_prompt` builds the task's text from them (empty: the row must carry messages).
    prompt_keys: ClassVar[tuple[str, ...]] = ()
    # A worked exchange shown before each task when the options say `few_shot: true`.
    few_shot_example: ClassVar[list[dict[str, str]] | None] = None
    # Python packages the verifier imports beyond the core install, and the extra of
    # pyproject.toml that brings them: config validation checks them (core/extras.py)
    requires: ClassVar[tuple[str, ...]] = ()
    requires_extra: ClassVar[str] = "environments"

    options: OptionsT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the type parameter of `Environment[X]` is the options model: declared once, read here
        for base in getattr(cls, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Environment):
                (model,) = typing.get_args(base)
                if isinstance(model, type):
                    cls.Options = model

    def __init__(self, options: dict[str, Any] | EnvironmentOptions | None = None):
        self.options = self.Options.model_validate({} if options is None else options)

    def warm(self) -> None:
        """Import heavy libraries now: the rollout job calls it in each verification worker
        while the first requests are in flight, so no verification pays for the import."""

    def check_row(self, row: dict[str, Any]) -> None:
        """Raise RowError if the row lacks what verification needs (called at materialize)."""
        missing = [f for f in self.required_fields if get_field(row, f) is None]
        if missing:
            raise RowError(f"missing field(s) needed by environment {self.name!r}: {missing}")
        for f in self.required_fields:
            if problem := _blank_or_not_finite(get_field(row, f)):
                raise RowError(f"{f}: {problem}")
        if self.prompt_keys:
            require_prompt(row, *self.prompt_keys)
            if not has_chat_prompt(row):
                key = next(k for k in self.prompt_keys if k in row)
                if problem := _blank_or_not_finite(row[key]):
                    raise RowError(f"{key}: {problem}; the task would have no prompt")

    def prompt(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The row's own messages, else one user turn of `plain_prompt`; with the few-shot
        example first when the options ask for it."""
        if self.prompt_keys and not has_chat_prompt(row):
            messages = [{"role": "user", "content": self.plain_prompt(row)}]
        else:
            messages = extract_messages(row)
        if self.few_shot_example and self.options.few_shot:
            return with_example(messages, self.few_shot_example)
        return messages

    def plain_prompt(self, row: dict[str, Any]) -> str:
        """The task's text from the row's `prompt_keys` (environments that declare them)."""
        raise NotImplementedError(f"environment {self.name!r} declares no prompt_keys")

    async def verify(
        self, row: dict[str, Any], completion: str, ctx: VerifyContext
    ) -> Verdict:  # pragma: no cover - abstract
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release resources (HTTP sessions, caches) at the end of a shard."""
