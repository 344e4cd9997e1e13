"""NeMo Gym's `math_with_code`: math with a stateful Python tool, judged by the boxed answer.

`execute_python(code)` runs the model's code in the code environment's sandbox (bubblewrap
where it works), in NeMo Gym's interpreter (few builtins; numpy, scipy and pandas bound as np,
scipy and pd; the value of a bare last line as `result`), and answers as its resource server
does: `{"success", "stdout", "stderr", "error_message", "result"}`. One interpreter state per
episode: each call runs in a fresh sandbox that first runs the episode's earlier cells again,
their output discarded (_python_session.py), so a killed job or a resumed episode has
nothing left running, and two episodes never share a variable. The reward is 1 when the last
`\\boxed{...}` of the assistant's messages (searched from the last one back), else of the tool
outputs' stdout, equals `expected_result` after NeMo Gym's normalization (outer `\\( \\)`, `$ $`,
`\\text{}` and spaces removed), or as numbers within 1e-6 relative.
"""

from __future__ import annotations

import json
import math
import sysconfig
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import PositiveFloat, PositiveInt

from rewardprof.environments.acting import ActingEnvironment, Episode, ToolFailure
from rewardprof.environments.base import Verdict, VerifyContext
from rewardprof.environments.options import EpisodeOptions
from rewardprof.environments.sandbox import Limits, SandboxError, choose_mechanism, run_tool_call

SESSION = (Path(__file__).parent / "_python_session.py").read_text()
READY = "ready\n"  # the session's first line, once numpy, scipy and pandas are loaded
ANSWER_KEYS = {"stdout", "stderr", "result", "error_message"}
_NUMERIC_CHARS = 4300  # longer strings are not compared as numbers (float() is not linear)


class MathWithCodeOptions(EpisodeOptions):
    """The episode's bounds and the Python tool's limits."""

    max_steps: PositiveInt = 3
    """Most model turns of one episode: 3, as NeMo Gym's agent for this environment (its
    recorded examples ran longer)."""
    max_execution_time: PositiveInt = 10
    """Seconds one call's code may run (NeMo Gym's SIGALRM); also per earlier cell re-run."""
    max_cells: PositiveInt = 24
    """Most execute_python calls of one episode; later ones are answered with an error (the
    state is rebuilt by running every earlier cell again, so this bounds a call's cost)."""
    memory_mb: PositiveInt = 1024
    """Memory of the sandbox of one call, in MiB (numpy, scipy and pandas loaded)."""
    timeout_s: PositiveFloat = 120
    """Wall clock of one call's sandbox (its earlier cells included); past it the call is
    answered as timed out, as NeMo Gym answers a call past max_execution_time."""


def _answer(
    stdout: str = "", stderr: str = "", result: str | None = None, error: str | None = None
) -> str:
    # FastAPI's JSON as the resource server sends it: compact, the model's field order
    body = {
        "success": error is None,
        "stdout": stdout,
        "stderr": stderr,
        "error_message": error,
        "result": result,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def run_cell(
    cells: list[str], code: str, limits: dict[str, Any], timeout: int, max_chars: int
) -> str:
    """In a verification worker: one execute_python call in a fresh sandbox; its answer."""
    request = {"cells": cells, "code": code, "timeout_s": timeout, "max_chars": max_chars}
    res = run_tool_call(SESSION, request, Limits(**limits), "rewardprof-pytool-")
    if not res.stdout.startswith(READY):  # numpy & co. did not load: the tool is broken
        raise ToolFailure(f"the Python tool did not start: {res.stderr[-300:]!r}")
    if res.timed_out:
        return _answer(error="code timed-out")
    last = res.stdout.rstrip("\n").rpartition("\n")[2]
    try:
        answer = json.loads(last)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or set(answer) != ANSWER_KEYS:
        # the code ended its process (exit, memory, a signal) or wrote past the output cap
        return _answer(error=f"the code's process ended without an answer ({res.returncode})")
    return _answer(answer["stdout"], answer["stderr"], answer["result"], answer["error_message"])


def boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} of text, braces balanced (None without one)."""
    idx = text.rfind("\\boxed{")
    if idx == -1:
        return None
    start = i = idx + len("\\boxed{")
    depth = 1
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    if depth:
        return None
    return text[start : i - 1].strip() or None


def _normalized(s: str) -> str:
    s = s.strip()
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2].strip()
    if s.startswith("$") and s.endswith("$") and len(s) > 1:
        s = s[1:-1].strip()
    if s.startswith("\\text{") and s.endswith("}"):
        s = s[6:-1].strip()
    return " ".join(s.split())


def answers_match(actual: str | None, expected: str) -> bool:
    if actual is None:
        return False
    got, want = _normalized(actual), _normalized(expected)
    if got == want:
        return True
    if max(len(got), len(want)) > _NUMERIC_CHARS:
        return False
    try:
        fa, fe = float(got), float(want)
    except ValueError:
        return False
    return math.isfinite(fe) and abs(fa - fe) < 1e-6 * max(1.0, abs(fe))


def score(messages: list[dict[str, Any]], expected: str) -> tuple[float, dict[str, Any]]:
    """NeMo Gym's verify on the episode's chat messages: reward and extras."""
    actual = None
    for m in reversed(messages):
        if m.get("role") == "assistant" and (actual := boxed(m.get("content") or "")):
            break
    if actual is None:  # the model may print its boxed answer from the code
        for m in reversed(messages):
            if m.get("role") != "tool":
                continue
            try:
                output = json.loads(m["content"])
                stdout = output.get("stdout", "") if isinstance(output, dict) else m["content"]
            except ValueError:
                stdout = m["content"]
            if actual := boxed(stdout if isinstance(stdout, str) else ""):
                break
    accuracy = answers_match(actual, expected)
    return float(accuracy), {"extracted_answer": actual, "accuracy": accuracy}


class MathWithCodeEnvironment(ActingEnvironment[MathWithCodeOptions]):
    name = "math_with_code"
    required_fields = ("expected_result",)

    def warm(self) -> None:
        choose_mechanism(self._limits())  # bubblewrap's probe, once per worker

    def _limits(self) -> Limits:
        o = self.options
        return Limits(
            timeout_s=o.timeout_s,
            # the answer's four fields, each cut to max_tool_output_chars, JSON-escaped
            max_output_bytes=o.max_tool_output_chars * 4 * 6 + (1 << 16),
            cpu_s=int(o.timeout_s),
            memory_mb=o.memory_mb,
            packages=(sysconfig.get_paths()["purelib"],),  # this environment's numpy & co.
        )

    def call_timeout_s(self) -> float:
        return self.options.timeout_s + 30  # the sandbox's own wall clock ends it first

    def seed_state(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"cells": []}

    def call(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        if name != "execute_python":
            raise KeyError(name)
        code = arguments.get("code")
        if not isinstance(code, str):
            raise ValueError("code: expected a string")
        cells = state["cells"]
        if len(cells) >= self.options.max_cells:
            return _answer(error=f"this session ran {len(cells)} cells, the most it may"), state
        limits = asdict(self._limits())
        try:
            output = run_cell(
                cells,
                code,
                limits,
                self.options.max_execution_time,
                self.options.max_tool_output_chars,
            )
        except SandboxError as exc:
            raise ToolFailure(str(exc)) from exc
        return output, {"cells": [*cells, code]}

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:
        reward, extras = await ctx.run_in_pool(
            score, episode.messages[episode.prompt_messages :], str(row["expected_result"])
        )
        return Verdict(reward=reward, extras=extras)
