"""Building blocks shared by the run config (core/config.py) and the environments' `Options`
(environments/options.py), so both read the same keys the same way: the strict model base, an
HTTP base URL, and how an HTTP client retries (the retry loop itself is engine/http_retry.py).
Imports only pydantic: config validation stays cheap and imports no verifier library."""

from __future__ import annotations

import os
import re
import unicodedata
import urllib.parse
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

from rewardprof.core.redaction import EXPANDED_URL_VARIABLES, URL_VARIABLE


class StrictModel(BaseModel):
    """Unknown keys are errors (reported with the nearest valid key); defaults are validated.
    Values are never coerced (pydantic's strict mode): `num_repeats: "4"` or `num_repeats: true`
    is an error naming the key, not 4 or 1; an integer is accepted where a number is expected."""

    model_config = ConfigDict(
        extra="forbid", validate_default=True, use_attribute_docstrings=True, strict=True
    )


# Characters a shell reads as more than a path; a path the rules hand to a shell (quoted there
# too) never has them.
_SHELL_SPECIAL = set("$`;|&<>(){}[]!*?\"'\\#")


def _plain_path(value: str) -> str:
    bad = sorted({c for c in value if c in _SHELL_SPECIAL or not c.isprintable()})
    if bad:
        raise ValueError(f"must be a plain path; it has {''.join(bad)!r}")
    if not value or len(value) > 4096:
        raise ValueError("must be a path of 1 to 4096 characters")
    return value


PlainPath = Annotated[str, AfterValidator(_plain_path)]

# what ends or bends a line of a generated script: C0/C1 controls, DEL, Unicode's line breaks
_LINE_BREAKERS = {"\u2028", "\u2029"}


def _one_line(value: str) -> str:
    bad = next((c for c in value if unicodedata.category(c) == "Cc" or c in _LINE_BREAKERS), None)
    if bad is not None:
        raise ValueError(
            f"has the control character U+{ord(bad):04X} at {value.index(bad)}: the value reaches "
            "a generated script or command line; write it on one line, without control characters"
        )
    return value


# A value that reaches a generated script or a command line (sbatch lines, vLLM's arguments and
# environment): one line of printable text, so no value can add a line of its own
OneLine = Annotated[str, AfterValidator(_one_line)]


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if not os.environ.get(name):
            raise ValueError(f"environment variable {name} (named in the URL) is not set")
        quoted = urllib.parse.quote(os.environ[name], safe="")
        EXPANDED_URL_VARIABLES[quoted] = name
        return quoted

    return URL_VARIABLE.sub(variable, value).rstrip("/")


# An OpenAI-compatible base URL (".../v1"); the trailing slash is dropped so paths join cleanly.
# `${NAME}` in it is replaced by that environment variable's value (percent-encoded): a password
# kept out of the config file (Snakemake's report embeds config files), e.g.
# https://user:${MY_PASSWORD}@host/v1.
HttpUrl = Annotated[str, AfterValidator(_http_url)]


class RetryOptions(BaseModel):
    max_attempts: PositiveInt = Field(4, description="HTTP attempts per request.")
    backoff_initial_s: NonNegativeFloat = Field(
        1.0, description="First retry delay; doubles per attempt, with jitter."
    )
    backoff_max_s: NonNegativeFloat = Field(
        60.0, description="Longest backoff delay (a longer Retry-After is still honoured)."
    )
    retry_after_max_s: NonNegativeFloat = Field(
        300.0,
        description="Longest Retry-After honoured: a server asking for more is waited this long.",
    )
    retry_budget_s: PositiveFloat = Field(
        1800.0,
        description="Most time one request may spend retrying, in total; a wait that would pass "
        "it ends the request with its last failure.",
    )
