"""math: the last complete \\boxed{...} of the completion, compared with math-verify.

math-verify parses LaTeX into SymPy; a pathological expression can wedge SymPy for minutes, so
the comparison runs in a worker process with a hard timeout (a timeout is a `verifier_timeout`
failure, never a 0).
"""

from __future__ import annotations

import re
from typing import Any

from rewardprof.environments.base import Environment, RowError, Verdict, VerifyContext
from rewardprof.records import FailureKind

BOX_INSTRUCTION = "Put your final answer within \\boxed{}."
_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_OUTER_PARENS = re.compile(r"^\s*\\\((.*)\\\)\s*$", re.S)


def last_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (nested braces handled), or None."""
    found = None
    for m in _BOX_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "\\" and i + 1 < len(text):  # skip escaped braces like \{
                i += 2
                continue
            depth += c == "{"
            depth -= c == "}"
            i += 1
        if depth == 0:
            found = text[m.end() : i - 1]
    return found


def normalize_expected(expected: Any) -> str:
    # NeMo Gym strips outer \( ... \) from expected answers before boxing them.
    s = str(expected).strip()
    m = _OUTER_PARENS.match(s)
    return m.group(1).strip() if m else s


def math_equal(expected: str, answer: str, timeout_s: float) -> bool:
    """Runs in a worker process: math-verify's own comparison of two boxed answers."""
    from math_verify import LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    gold = parse("\\boxed{" + expected + "}", extraction_config=cfg)
    pred = parse("\\boxed{" + answer + "}", extraction_config=cfg)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=max(1, int(timeout_s))))


class MathEnvironment(Environment):
    name = "math"
    required_fields = ("expected_answer",)
    failure_kinds = (FailureKind.VERIFIER_ERROR, FailureKind.VERIFIER_TIMEOUT)

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        if not any(k in row for k in ("responses_create_params", "messages", "prompt", "problem",
                                      "question")):
            raise RowError("no prompt: expected responses_create_params.input, messages, "
                           "prompt, problem or question")

    def prompt(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        if not any(k in row for k in ("responses_create_params", "messages", "prompt")):
            question = row.get("problem", row.get("question"))
            return [{"role": "user", "content": f"{question}\n\n{BOX_INSTRUCTION}"}]
        return super().prompt(row)

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        expected = normalize_expected(row["expected_answer"])
        answer = last_boxed(completion)
        if answer is None:
            return Verdict(0.0, extras={"extracted": None, "reason": "no_boxed_answer"})
        timeout = float(self.options.get("timeout_s", ctx.timeout_s))
        try:
            # The pool's hard timeout sits above math-verify's own, so a wedged call is killed.
            same = await ctx.run_in_pool(math_equal, expected, answer, timeout,
                                         timeout_s=timeout + 5)
        except TimeoutError:
            return Verdict.failure(FailureKind.VERIFIER_TIMEOUT,
                                   f"math-verify exceeded {timeout:g}s", extracted=answer)
        except Exception as exc:  # a crash in the verifier is recorded, never a silent 0
            return Verdict.failure(FailureKind.VERIFIER_ERROR,
                                   f"{type(exc).__name__}: {exc}"[:300], extracted=answer)
        return Verdict(1.0 if same else 0.0, extras={"extracted": answer})
