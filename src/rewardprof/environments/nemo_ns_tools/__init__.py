"""NeMo Gym's `ns_tools`: math with NeMo Skills' stateful Python tool, judged as math_with_judge.

`stateful_python_code_exec(code)` runs the model's code in the code environment's sandbox
(bubblewrap where it works) in an IPython shell as NeMo Skills' sandbox runs it
(_ipython_session.py), and answers as NeMo Skills' `DirectPythonTool` does: the cell's
stdout then stderr as plain text, its traceback plain with the `File <ipython-...>` lines and
the `Out[n]:` prompts removed, each stream cut at `max_output_characters` with `<output cut>`,
one trailing newline dropped. Past `exec_timeout_s` the cell is interrupted (its
KeyboardInterrupt traceback is the answer); a cell that does not stop within half a second more
is killed and answered `Execution timed out after N seconds`, and the episode's interpreter is
lost: that call and the next one carry NeMo Skills' warning, as its ns_tools configuration
(`disable_session_restore: true`) has it.

One interpreter state per episode: each call runs in a fresh sandbox that first runs the
episode's earlier cells again, their output discarded, so a killed job or a resumed episode has
nothing left running and two episodes never share a variable. An interrupted cell is not run
again (it would cost its whole timeout each time): what it changed before the interrupt is the
one state this tool does not rebuild.

The reward is math_with_judge's: math-verify on all assistant texts of the episode joined, its
last `\\boxed{}` against `expected_answer` (this project's `math` environment, with its judge
fallback when `judge` is set).
"""

from __future__ import annotations

import json
import re
import sysconfig
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import PositiveFloat, PositiveInt

from rewardprof.environments.acting import ActingEnvironment, Episode, ToolFailure
from rewardprof.environments.base import RowError, Verdict, VerifyContext
from rewardprof.environments.options import EpisodeOptions, JudgeOptions
from rewardprof.environments.sandbox import Limits, SandboxError, choose_mechanism, run_tool_call

SESSION = (Path(__file__).parent / "_ipython_session.py").read_text()
TOOL = "stateful_python_code_exec"
GRACE_S = 0.5  # NeMo Skills' wait between its SIGINT and killing the shell
# NeMo Skills' words when a session was lost and is not restored (its sandbox.py)
RESTART_WARNING = (
    "RuntimeError: Sandbox state restoration failed after the execution worker restarted. "
    "The interactive session history has been cleared; "
    "please re-run the last code block without relying on prior state.\n"
)
_ANSI = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")
_OUT_PROMPT = re.compile(r"^Out\[\d+\]:\s*")


class NsToolsOptions(EpisodeOptions):
    """The episode's bounds, the Python tool's limits and the judge fallback."""

    max_steps: PositiveInt = 50
    """Most model turns of one episode: 50, as NeMo Gym's ns_tools agent."""
    max_tool_output_chars: PositiveInt = 4096
    """Past the tool's own cut (two streams of max_output_characters and a warning)."""
    exec_timeout_s: PositiveInt = 10
    """Seconds a cell runs before it is interrupted (NeMo Gym's ns_tools: 10)."""
    max_output_characters: PositiveInt = 1000
    """Characters of stdout and of stderr each answer keeps (NeMo Skills' default: 1000)."""
    max_cells: PositiveInt = 24
    """Most calls of one episode; later ones are answered with an error (the state is rebuilt
    by running every earlier cell again, so this bounds one call's cost)."""
    memory_mb: PositiveInt = 2048
    """Memory of the sandbox of one call, in MiB."""
    timeout_s: PositiveFloat = 300
    """Wall clock of one call's sandbox, its earlier cells included."""
    judge: JudgeOptions | None = None
    """math_with_judge's judge fallback (null: off, as NeMo Gym's default config)."""


def _postprocess(text: str) -> str:
    # NeMo Skills' postprocess_output for plain tracebacks
    lines = [
        _OUT_PROMPT.sub("", line)
        for line in _ANSI.sub("", text).split("\n")
        if not line.strip().startswith("File <ipython-")
    ]
    while lines and lines[0] == "":
        lines.pop(0)
    out = "\n".join(lines).rstrip()
    return out + ("\n" if out else "")


def _cut(text: str, limit: int, more: bool) -> str:
    # the sandbox kept the first characters only; `more` says it dropped some
    if len(text) > limit or more:
        return text[:limit] + "<output cut>"
    return text


def tool_output(stdout: str, stderr: str) -> str:
    """DirectPythonTool's text: stdout then stderr, one trailing newline removed."""
    output = stdout + stderr
    return output[:-1] if output.endswith("\n") else output


def run_cell(
    cells: list[str], code: str, limits: dict[str, Any], timeout: int, max_chars: int
) -> tuple[str, str, str, list[bool]]:
    """In a verification worker: one call in a fresh sandbox; (stdout, stderr, status, cut)
    with status completed | error | interrupted | timeout | died | lost."""
    request = {
        "cells": cells,
        "code": code,
        "timeout_s": timeout,
        "grace_s": GRACE_S,
        "max_chars": 4 * max_chars + 4096,  # what postprocessing removes still fits
    }
    res = run_tool_call(SESSION, request, Limits(**limits), "rewardprof-nspy-")
    if not res.stdout.startswith("ready\n"):  # IPython did not start: the tool is broken
        raise ToolFailure(f"the Python tool did not start: {res.stderr[-300:]!r}")
    head, marker, tail = res.stdout.partition("\ncell\n")
    if not marker:  # an earlier cell did not run again as it first ran
        return "", "", "lost", [False, False]
    try:
        answer = json.loads(tail.rstrip("\n").rpartition("\n")[2])
    except ValueError:
        answer = None
    if isinstance(answer, dict) and set(answer) == {"stdout", "stderr", "status", "cut"}:
        return answer["stdout"], answer["stderr"], answer["status"], answer["cut"]
    if res.timed_out or "Timeout (" in tail:  # killed past its timeout and grace
        return "", "", "timeout", [False, False]
    return "", "", "died", [False, False]  # memory, os._exit, a signal: its shell died too


def answer(
    outcome: tuple[str, str, str, list[bool]], state: dict[str, Any], o: NsToolsOptions, code: str
) -> tuple[str, dict[str, Any]]:
    """The tool's text for one call's outcome, and the episode's state after it."""
    stdout, stderr, status, (out_cut, err_cut) = outcome
    started = state["calls"] > 0  # NeMo Skills warns only once a session id exists
    cells = state["cells"]
    if status == "timeout":
        stdout, stderr = "", f"Execution timed out after {o.exec_timeout_s} seconds\n"
    elif status == "died":
        stdout, stderr = "", "connection closed\n"
    elif status == "lost":
        stdout, stderr = "", ""
    out = _cut(_postprocess(stdout), o.max_output_characters, out_cut)
    err = _cut(_postprocess(stderr), o.max_output_characters, err_cut)
    lost = status in ("timeout", "died", "lost")
    if status == "lost" or (started and (lost or state["restarted"])):
        err = RESTART_WARNING + err
    if lost:
        cells = []
    elif status != "interrupted":
        cells = [*cells, code]
    new_state = {"cells": cells, "calls": state["calls"] + 1, "restarted": lost}
    return tool_output(out, err), new_state


class NsToolsEnvironment(ActingEnvironment[NsToolsOptions]):
    name = "ns_tools"
    required_fields = ("expected_answer",)
    prompt_keys = ("question",)

    def __init__(self, options: dict[str, Any] | NsToolsOptions | None = None):
        super().__init__(options)
        from rewardprof.environments.math import MathEnvironment  # lazy: math-verify

        judge = self.options.judge
        self._math = MathEnvironment({"judge": judge.model_dump() if judge else None})

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        verifier = row.get("verifier_type") or "math_with_judge"
        if verifier != "math_with_judge":
            raise RowError(
                f"verifier_type {verifier!r}: ns_tools here verifies with math_with_judge only"
            )

    def warm(self) -> None:
        choose_mechanism(self._limits())  # bubblewrap's probe, once per worker
        self._math.warm()

    def _limits(self) -> Limits:
        o = self.options
        return Limits(
            timeout_s=o.timeout_s,
            max_output_bytes=(4 * o.max_output_characters + 4096) * 2 * 6 + (1 << 16),
            cpu_s=int(o.timeout_s),
            memory_mb=o.memory_mb,
            packages=(sysconfig.get_paths()["purelib"],),  # IPython, sympy, numpy & co.
        )

    def call_timeout_s(self) -> float:
        return self.options.timeout_s + 30  # the sandbox's own wall clock ends it first

    def seed_state(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"cells": [], "calls": 0, "restarted": False}

    def call(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        if name != TOOL:
            raise KeyError(name)
        code = arguments.get("code")
        if not isinstance(code, str):
            raise ValueError("code: expected a string")
        o = self.options
        if len(state["cells"]) >= o.max_cells:
            text = f"Error: this session ran {len(state['cells'])} cells, the most it may"
            return text, {**state, "calls": state["calls"] + 1}
        limits = asdict(self._limits())
        try:
            outcome = run_cell(
                state["cells"], code, limits, o.exec_timeout_s, o.max_output_characters
            )
        except SandboxError as exc:
            raise ToolFailure(str(exc)) from exc
        return answer(outcome, state, o, code)

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:
        said = episode.messages[episode.prompt_messages :]
        text = "".join(m.get("content") or "" for m in said if m.get("role") == "assistant")
        return await self._math.verify(row, text, ctx)
