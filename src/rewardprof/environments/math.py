"""math: the last complete \\boxed{...} of the completion, compared with math-verify.

Row format: `expected_answer` (outer `\\( ... \\)` stripped, as NeMo Gym does) and a prompt
(`responses_create_params.input`, `messages`, `prompt`, or `problem` / `question`, to which the
box instruction is appended). No complete box is reward 0 with reason "no_boxed_answer".

math-verify parses LaTeX into SymPy; a pathological expression can wedge SymPy for minutes, so
the comparison runs in a worker process with a hard timeout (`options.timeout_s`; a timeout is a
`verifier_timeout` failure, never a 0).

Optional judge fallback (off by default): with `options.judge` set to judge client options
(base_url, model, ...: `rewardprof.environments.options.JudgeOptions`), an answer math-verify
rejects is shown to the judge with the expected answer; its EQUIVALENT verdict gives reward 1
(extras.judged = true). A judge that fails or answers garbage makes the rollout a
`judge_error`, not a 0.
"""

from __future__ import annotations

import re
from typing import Any

from rewardprof.core.kinds import FailureKind
from rewardprof.environments.base import (
    Environment,
    Verdict,
    VerifyContext,
)
from rewardprof.environments.extract import last_boxed
from rewardprof.environments.options import JudgeOptions, VerifyTimeout

BOX_INSTRUCTION = "Put your final answer within \\boxed{}."
_OUTER_PARENS = re.compile(r"^\s*\\\((.*)\\\)\s*$", re.S)


def normalize_expected(expected: Any) -> str:
    # NeMo Gym strips outer \( ... \) from expected answers before boxing them.
    s = str(expected).strip()
    m = _OUTER_PARENS.match(s)
    return m.group(1).strip() if m else s


def boxed_answer(completion: str) -> str | None:
    """The last complete box's content without a sentence's closing period ("\\boxed{5.}"),
    or None. Linear (extract.py): `"\\s*\\.?\\s*$"` as a regex was quadratic in the spaces."""
    answer = last_boxed(completion)
    if answer is None:
        return None
    answer = answer.rstrip()
    return answer.removesuffix(".").rstrip()


def math_equal(expected: str, answer: str, timeout_s: float) -> bool:
    """Runs in a worker process: math-verify's own comparison of two boxed answers."""
    from math_verify import LatexExtractionConfig, parse, verify  # lazy: SymPy (~1 s)

    cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    gold = parse("\\boxed{" + expected + "}", extraction_config=cfg)
    pred = parse("\\boxed{" + answer + "}", extraction_config=cfg)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=max(1, int(timeout_s))))


JUDGE_TEMPLATE = """Are these two final answers to the math problem mathematically equivalent?

Problem (may be empty): {question}
Expected answer: {expected}
Given answer: {answer}

Reply with one line: VERDICT: EQUIVALENT or VERDICT: NOT_EQUIVALENT"""
_JUDGE_VERDICT = re.compile(r"VERDICT:\s*+\**+\s*+(NOT_EQUIVALENT|EQUIVALENT)")


class MathOptions(VerifyTimeout):
    judge: JudgeOptions | None = None
    """Judge fallback (null: off): an answer math-verify rejects is shown to this judge with the
    expected answer; VERDICT: EQUIVALENT gives 1 (extras.judged)."""


class MathEnvironment(Environment[MathOptions]):
    name = "math"
    required_fields = ("expected_answer",)
    prompt_keys = ("problem", "question")

    def __init__(self, options: dict[str, Any] | MathOptions | None = None):
        super().__init__(options)
        self._judge: Any = None
        if self.options.judge is not None:
            from rewardprof.environments.judge import JudgeClient  # lazy: aiohttp, judge only

            self._judge = JudgeClient(self.options.judge)  # its session is made on first use

    def warm(self) -> None:
        """Import math-verify now, e.g. before a fork-based pool starts."""
        import math_verify  # noqa: F401  # lazy: math-verify imports SymPy (~1 s)

    def plain_prompt(self, row: dict[str, Any]) -> str:
        return f"{row.get('problem', row.get('question'))}\n\n{BOX_INSTRUCTION}"

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        expected = normalize_expected(row["expected_answer"])
        answer = await ctx.off_loop(boxed_answer, completion)
        if answer is None:
            return Verdict(0.0, extras={"extracted": None, "reason": "no_boxed_answer"})
        if not answer:
            return Verdict(0.0, extras={"extracted": "", "reason": "empty_box"})
        timeout = self.options.timeout_s or ctx.timeout_s
        try:
            # The pool's hard timeout sits above math-verify's own, so a wedged call is killed.
            same = await ctx.run_in_pool(
                math_equal, expected, answer, timeout, timeout_s=timeout + 5
            )
        except TimeoutError:
            return Verdict.failure(
                FailureKind.VERIFIER_TIMEOUT, f"math-verify exceeded {timeout:g}s", extracted=answer
            )
        except Exception as exc:  # a crash in the verifier is recorded, never a silent 0
            return Verdict.failure(
                FailureKind.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}"[:300], extracted=answer
            )
        if not same and self._judge is not None:
            return await self._judge_fallback(row, expected, answer)
        return Verdict(1.0 if same else 0.0, extras={"extracted": answer})

    async def _judge_fallback(self, row: dict[str, Any], expected: str, answer: str) -> Verdict:
        from rewardprof.environments.judge import JudgeError, parse_verdict  # lazy: aiohttp

        text = JUDGE_TEMPLATE.format(
            question=row.get("problem", row.get("question", "")), expected=expected, answer=answer
        )
        try:
            reply = await self._judge.complete([{"role": "user", "content": text}])
            reward = parse_verdict(
                reply, _JUDGE_VERDICT, {"EQUIVALENT": 1.0, "NOT_EQUIVALENT": 0.0}, 1.0
            )
        except JudgeError as exc:
            return Verdict.failure(FailureKind.JUDGE_ERROR, str(exc)[:300], extracted=answer)
        return Verdict(reward, extras={"extracted": answer, "judged": True})

    async def aclose(self) -> None:
        if self._judge is not None:
            await self._judge.aclose()
