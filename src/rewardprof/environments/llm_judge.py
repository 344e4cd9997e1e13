"""llm_judge: a judge model on its own OpenAI-compatible endpoint scores the completion.

Row format: the prompt (`responses_create_params.input`, `messages`, `prompt`) or `question`;
optionally a reference (`reference_answer` or `expected_answer`) and a `rubric`. The judge sees
`options.prompt_template` filled with {question}, {response}, {reference}, {rubric}; the last
match of `options.verdict_regex` in its reply is the verdict: a key of `options.verdict_rewards`
(default CORRECT -> 1, INCORRECT -> 0) or a number, divided by `options.score_max`.

Options (`LLMJudgeOptions`): the judge client's (base_url and model required, api_key_env,
concurrency, retries, sampling, cache_dir; `rewardprof.environments.options.JudgeOptions`) plus
the four above. Retries, the shared Retry-After pause and the reply cache are the judge
client's (`rewardprof.environments.judge`). A judge that keeps failing, or a reply with no
parseable verdict, is a `judge_error` failure, never a wrong answer.
"""

from __future__ import annotations

import re
import string
from typing import Any

from pydantic import Field, PositiveFloat, field_validator

from rewardprof.core.kinds import FailureKind
from rewardprof.environments.base import (
    Environment,
    Verdict,
    VerifyContext,
    extract_messages,
)
from rewardprof.environments.extract import last_user_text, tag_spans
from rewardprof.environments.judge import JudgeClient, JudgeError, parse_verdict
from rewardprof.environments.options import JudgeOptions

DEFAULT_TEMPLATE = """You are grading an answer to a question.

Question:
{question}

Reference answer (may be empty):
{reference}

Grading rubric (may be empty):
{rubric}

Answer to grade:
{response}

Decide whether the answer is correct. End your reply with exactly one line:
VERDICT: CORRECT or VERDICT: INCORRECT"""
DEFAULT_VERDICT_REGEX = r"VERDICT:\s*+\**+\s*+(CORRECT|INCORRECT)"


def without_think(completion: str) -> str:
    """The completion without its <think>...</think> spans, in any case (linear:
    extract.tag_spans)."""
    out, at = [], 0
    for start, end, _, _ in tag_spans(completion, "think"):
        out.append(completion[at:start])
        at = end
    return "".join(out) + completion[at:]


_FIELDS = {"question", "response", "reference", "rubric"}


class LLMJudgeOptions(JudgeOptions):
    prompt_template: str | None = None
    """What the judge is sent, with {question}, {response} (the completion, `<think>` blocks
    removed), {reference}, {rubric} (null: a template asking for VERDICT: CORRECT or VERDICT:
    INCORRECT, docs/environments.md)."""
    verdict_regex: str = DEFAULT_VERDICT_REGEX
    """Its last match in the reply is the verdict (group 1 if it has a group)."""
    verdict_rewards: dict[str, float] = Field(
        default_factory=lambda: {"CORRECT": 1.0, "INCORRECT": 0.0}
    )
    """Verdict -> reward (case-insensitive); any other verdict must be a number."""
    score_max: PositiveFloat = 1.0
    """A numeric verdict is divided by this; the result must be in [0, 1]."""

    @field_validator("prompt_template")
    @classmethod
    def _known_fields(cls, v: str | None) -> str | None:
        used = {f for _, f, _, _ in string.Formatter().parse(v or "") if f}
        if used - _FIELDS:
            raise ValueError(
                f"unknown fields {sorted(used - _FIELDS)}; available: {sorted(_FIELDS)}"
            )
        return v

    @field_validator("verdict_regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regex: {exc}") from None
        return v


class LLMJudgeEnvironment(Environment[LLMJudgeOptions]):
    name = "llm_judge"
    prompt_keys = ("question",)

    def __init__(self, options: dict[str, Any] | LLMJudgeOptions | None = None):
        super().__init__(options)
        self.judge = JudgeClient(self.options)
        self.template = self.options.prompt_template or DEFAULT_TEMPLATE
        self.verdict_re = re.compile(self.options.verdict_regex)

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        if "question" not in row:
            extract_messages(row)

    def judge_messages(self, row: dict[str, Any], completion: str) -> list[dict[str, str]]:
        question = row.get("question")
        if question is None:
            question = last_user_text(extract_messages(row))
        reference = row.get("reference_answer", row.get("expected_answer", ""))
        text = self.template.format(
            question=question,
            reference=reference or "",
            rubric=row.get("rubric") or "",
            response=without_think(completion).strip(),
        )
        return [{"role": "user", "content": text}]

    def plain_prompt(self, row: dict[str, Any]) -> str:
        return str(row["question"])

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        try:
            messages = await ctx.off_loop(self.judge_messages, row, completion)
            reply = await self.judge.complete(messages)
            reward = parse_verdict(
                reply, self.verdict_re, self.options.verdict_rewards, self.options.score_max
            )
        except JudgeError as exc:
            return Verdict.failure(FailureKind.JUDGE_ERROR, str(exc)[:300])
        return Verdict(reward, extras={"judge_reply_tail": reply[-300:]})

    async def aclose(self) -> None:
        await self.judge.aclose()
