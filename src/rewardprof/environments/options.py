"""Typed environment options: the base of every environment's `Options` model, and the option
groups several environments share (a verification timeout, few-shot prompting, a judge client).

An entry's `options:` mapping is validated against its environment's `Options` together with
the rest of the config (`rewardprof.manifest.load.validate_config`, before the DAG is built), so
a typo fails with one line naming the key, not mid-run. This module imports only pydantic:
validating a config must not import any verifier library.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

from rewardprof.core.config_types import HttpUrl, RetryOptions, StrictModel


class EnvironmentOptions(StrictModel):
    """Base of every environment's `Options` model."""


class VerifyTimeout(EnvironmentOptions):
    timeout_s: PositiveFloat | None = None
    """Hard timeout of one verification, in seconds (null: rollout.verify_timeout_s); past it the
    rollout is a verifier_timeout, never a 0."""


class FewShot(EnvironmentOptions):
    few_shot: bool = False
    """Put one worked exchange (a task and a reply in the format the verifier reads) before each
    task's prompt: small models copy the format they are shown."""


class JudgeOptions(EnvironmentOptions, RetryOptions):
    """A judge model on its own OpenAI-compatible endpoint (llm_judge, math's fallback)."""

    base_url: HttpUrl
    """The judge's endpoint, e.g. http://127.0.0.1:8001/v1 (`${NAME}` is replaced by that
    environment variable, as in engine.base_url)."""
    model: str = Field(min_length=1)
    """Model name sent in the judge's requests."""
    api_key_env: str | None = None
    """Name of the environment variable that holds the judge's API key."""
    concurrency: PositiveInt = 4
    """Requests in flight to the judge (separate from rollout.concurrency)."""
    max_attempts: PositiveInt = 5
    """HTTP attempts per judgement; then the rollout is a judge_error."""
    request_timeout_s: PositiveFloat = 120.0
    """Per-request timeout; past it the attempt fails and is retried."""
    temperature: NonNegativeFloat = 0.0
    """The judge's sampling temperature."""
    max_tokens: PositiveInt = 512
    """Most tokens of the judge's reply."""
    cache_dir: str | None = None
    """Directory of cached replies, keyed by the request body: a rerun does not pay for the same
    judgement twice (null: no cache)."""


class EpisodeOptions(EnvironmentOptions):
    """The bounds of one episode of an environment that acts (rewardprof.environments.acting)."""

    max_steps: PositiveInt = 8
    """Most model turns of one episode; an episode still calling tools then stops
    (stop reason max_steps) and is scored as it stands, as NeMo Gym's agent does."""
    max_total_tokens: PositiveInt = 8192
    """Most completion tokens over all turns of one episode (stop reason token_budget)."""
    max_tool_output_chars: PositiveInt = 16384
    """Most characters of one tool output carried into the next prompt (the rest is cut, and
    the cut is said in the output)."""
    max_trajectory_chars: PositiveInt = 1_000_000
    """Most characters of a whole trajectory as journaled; a larger episode is the failure
    trajectory_too_large."""
    tool_choice: Literal["auto", "required", "none"] = "auto"
    """The OpenAI tool_choice sent with every turn when the row's responses_create_params
    names none: 'required' makes the engine call a tool each turn (the episode then ends at
    max_steps), 'none' forbids calls."""
