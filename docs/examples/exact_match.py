"""exact_match: reward 1 when the completion's final answer equals the row's `expected_answer`.

Row format: a prompt (`responses_create_params.input`, `messages` or `prompt`) and
`expected_answer`. The final answer is the text after the last "Final answer:" (else the last
non-empty line). Option `case_sensitive` (default false).
"""

from __future__ import annotations

import re
from typing import Any

from rewardprof.environments import (
    Environment,
    EnvironmentOptions,
    RowError,
    Verdict,
    VerifyContext,
)

_FINAL = re.compile(r"final answer\s*:\s*(.+)", re.I)


def final_answer(completion: str) -> str | None:
    found = _FINAL.findall(completion)
    if found:
        return found[-1].strip()
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return lines[-1] if lines else None


class ExactMatchOptions(EnvironmentOptions):
    # The entry's `options:`, checked with the config; a key's docstring is its docs.
    case_sensitive: bool = False
    """Compare answers case-sensitively."""


# The type parameter is the options model: self.options is the entry's options, validated.
class ExactMatchEnvironment(Environment[ExactMatchOptions]):
    name = "exact_match"
    required_fields = ("expected_answer",)  # check_row refuses rows without it

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)  # required fields
        if not str(row["expected_answer"]).strip():
            raise RowError("expected_answer is empty")

    # prompt(row) is inherited: the row's own messages, in any of the supported formats.

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        answer = final_answer(completion)
        if answer is None:
            return Verdict(0.0, extras={"reason": "no_answer"})  # the model's fault: reward 0
        expected = str(row["expected_answer"]).strip()
        if not self.options.case_sensitive:
            answer, expected = answer.lower(), expected.lower()
        return Verdict(1.0 if answer == expected else 0.0, extras={"extracted": answer})
