"""The closed vocabularies every layer shares: a rollout's status (ok or a failure kind) and
where its completion token count came from. StrEnums, so a value is its text in Arrow, JSON
and f-strings, and a misspelled member fails at import instead of writing a new kind."""

from __future__ import annotations

from enum import StrEnum


class FailureKind(StrEnum):
    """Values of `status` other than "ok". A failed rollout has reward null, never 0."""

    ENGINE_ERROR = "engine_error"  # 5xx, malformed body, fewer choices than asked
    TIMEOUT = "timeout"  # no answer within request_timeout_s
    CONNECTION_ERROR = "connection_error"  # refused / reset
    RATE_LIMITED = "rate_limited"  # 429 until attempts or retry budget ran out
    CONTEXT_LENGTH = "context_length"  # prompt + max_tokens exceed the model's context
    REQUEST_ERROR = "request_error"  # other 4xx: the request itself is wrong
    VERIFIER_ERROR = "verifier_error"
    VERIFIER_TIMEOUT = "verifier_timeout"
    JUDGE_ERROR = "judge_error"
    # episodes (environments that act): what broke outside the model
    TOOL_ERROR = "tool_error"  # a tool failed (its own fault, not the model's call)
    TOOL_TIMEOUT = "tool_timeout"  # a tool call ran past verify_timeout_s
    TRAJECTORY_TOO_LARGE = "trajectory_too_large"  # the episode outgrew its journal bound


class Status(StrEnum):
    """A verdict's or record's status when nothing failed; any other status is a FailureKind."""

    OK = "ok"


OK = Status.OK


class TokensSource(StrEnum):
    """Values of `completion_tokens_source`."""

    ENGINE = "engine"  # the sample's own token ids
    USAGE = "usage"  # usage.completion_tokens of a one-sample response (or what remained)
    APPORTIONED = "apportioned"  # a several-sample usage total split by text length


INT32_MAX = 2**31 - 1  # the widest count an int32 column holds
