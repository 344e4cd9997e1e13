"""How an HTTP client retries, as config: shared by `rollout:` (the policy's requests) and a
judge's options (environments/options.py), so both read the same keys the same way. The retry
loop itself is engine/http_retry.py. Imports only pydantic: config validation stays cheap."""

from __future__ import annotations

from pydantic import BaseModel, Field, NonNegativeFloat, PositiveInt


class RetryOptions(BaseModel):
    max_attempts: PositiveInt = Field(4, description="HTTP attempts per request.")
    backoff_initial_s: NonNegativeFloat = Field(
        1.0, description="First retry delay; doubles per attempt, with jitter."
    )
    backoff_max_s: NonNegativeFloat = Field(
        60.0, description="Longest retry delay (a longer Retry-After is still honoured)."
    )
