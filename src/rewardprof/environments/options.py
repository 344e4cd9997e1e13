"""Typed environment options: the base of every environment's `Options` model, and the option
groups several environments share (a verification timeout, few-shot prompting, a judge client).

An entry's `options:` mapping is validated against its environment's `Options` together with
the rest of the config (`rewardprof.core.config.validate_config`, before the DAG is built), so
a typo fails with one line naming the key, not mid-run. This module imports only pydantic:
validating a config must not import any verifier library.
"""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    field_validator,
)

from rewardprof.core.retry import RetryOptions


class EnvironmentOptions(BaseModel):
    """Base of every `Options` model: unknown keys are errors (with the nearest valid key)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


class VerifyTimeout(EnvironmentOptions):
    timeout_s: PositiveFloat | None = Field(
        None,
        description="Hard timeout of one verification, in seconds (null: "
        "rollout.verify_timeout_s); past it the rollout is a verifier_timeout, never a 0.",
    )


class FewShot(EnvironmentOptions):
    few_shot: bool = Field(
        False,
        description="Put one worked exchange (a task and a reply in the format the verifier "
        "reads) before each task's prompt: small models copy the format they are shown.",
    )


class JudgeOptions(EnvironmentOptions, RetryOptions):
    """A judge model on its own OpenAI-compatible endpoint (llm_judge, math's fallback)."""

    base_url: str = Field(description="The judge's endpoint, e.g. http://127.0.0.1:8001/v1.")
    model: str = Field(min_length=1, description="Model name sent in the judge's requests.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable that holds the judge's API key."
    )
    concurrency: PositiveInt = Field(
        4, description="Requests in flight to the judge (separate from rollout.concurrency)."
    )
    max_attempts: PositiveInt = Field(
        5, description="HTTP attempts per judgement; then the rollout is a judge_error."
    )
    request_timeout_s: PositiveFloat = Field(
        120.0, description="Per-request timeout; past it the attempt fails and is retried."
    )
    temperature: NonNegativeFloat = Field(0.0, description="The judge's sampling temperature.")
    max_tokens: PositiveInt = Field(512, description="Most tokens of the judge's reply.")
    cache_dir: str | None = Field(
        None,
        description="Directory of cached replies, keyed by the request body: a rerun does not "
        "pay for the same judgement twice (null: no cache).",
    )

    @field_validator("base_url")
    @classmethod
    def _url_scheme(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v
