"""The code tests: each test runs the program in a fresh sandbox, and a pass must be earned.

`run_tests` runs in a verification worker process (never on the event loop). A test is either
- stdin/stdout: the program runs as a script with the test's stdin; its stdout, read outside
  the sandbox after every process of the sandbox is gone, is compared line by line with the
  expected output (trailing whitespace ignored); it must exit 0; or
- assert: the program is loaded as a module by the runner (_sandbox_runner.py), and this
  module, outside the sandbox, holds the conversation with it: it sends the test code only once
  the program has loaded, and this test's random nonce only once the test code has returned;
  the test passes only when the runner sends that nonce back. Exit status, stdout and anything
  the program prints or writes play no part: exiting early, `SystemExit`, a printed "pass" or a
  message out of order is a failure (`early_exit` or `protocol_violation`).
Every `a == b` of the test code goes through the runner's check against a rigged `__eq__`
(`guard_equality`). What the harness does not catch (documented in docs/environments.md): a
program written against this runner's own protocol, which would have to speak it from inside
the test, or one rigging other operators or the check itself.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import select
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from rewardprof.environments import sandbox_cleanup
from rewardprof.environments.sandbox import (
    Limits,
    RunResult,
    SandboxError,
    choose_mechanism,
    kill_uid,
    run_program,
    sandbox_python,
)
from rewardprof.environments.sandbox_bwrap import bwrap_works

RUNNER = (Path(__file__).with_name("_sandbox_runner.py")).read_text()
_MAX_MESSAGE = 1 << 16
# what the runner reports when the program or the test raised, as the test's outcome
_RAISED = {"assertion": "wrong_answer", "memory": "memory_limit", "error": "runtime_error"}
_VIOLATIONS = {
    "network": (
        "Network is unreachable",
        "name resolution",
        "Name or service not known",
        "Connection refused",
    ),
    "filesystem": ("Read-only file system", "Permission denied", "No such file or directory"),
    "processes": ("BlockingIOError", "Resource temporarily unavailable", "can't start new thread"),
}


def _violation(stderr: str) -> str | None:
    """Which containment the program ran into, judged from its error output."""
    for kind, markers in _VIOLATIONS.items():
        if any(m in stderr for m in markers):
            return kind
    return None


def _same_output(actual: str, expected: str) -> bool:
    a = [ln.rstrip() for ln in actual.strip().splitlines()]
    e = [ln.rstrip() for ln in str(expected).strip().splitlines()]
    return a == e


class _EqualityGuard(ast.NodeTransformer):
    """`a == b` -> `<name>(a, b)`: the runner's check that refuses a rigged __eq__."""

    def __init__(self, name: str):
        self.name = name

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], ast.Eq):
            return node
        call = ast.Call(ast.Name(self.name, ast.Load()), [node.left, node.comparators[0]], [])
        return ast.copy_location(call, node)


def guard_equality(test: str, name: str) -> str:
    """The test code with every single `==` comparison going through the runner's check."""
    try:
        tree = _EqualityGuard(name).visit(ast.parse(test))
        return ast.unparse(ast.fix_missing_locations(tree))
    except (SyntaxError, ValueError, RecursionError):
        return test  # the runner compiles it and reports the error as the test's


class _Conversation:
    """The harness's side of one assert test (see _sandbox_runner.py for the runner's)."""

    def __init__(self, test: str):
        # a name per test: the program cannot know what to rebind before the test runs
        self.equal = f"__rewardprof_equal_{secrets.token_hex(4)}__"
        self.test = guard_equality(test, self.equal)
        self.nonce = secrets.token_hex(16)
        self.from_runner, self.runner_out = os.pipe()
        self.runner_in, self.to_runner = os.pipe()
        os.set_blocking(self.to_runner, False)
        self._buffer = b""

    def runner_config(self) -> dict[str, int]:
        return {"to_harness": self.runner_out, "from_harness": self.runner_in}

    def child_fds(self) -> tuple[int, int]:
        return (self.runner_out, self.runner_in)

    def _receive(self, deadline: float) -> dict[str, Any] | str:
        """The runner's next message, or "eof" / "timeout" / "malformed"."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_runner], [], [], left)[0]:
                return "timeout"
            chunk = os.read(self.from_runner, _MAX_MESSAGE)
            if not chunk:
                return "eof"
            self._buffer += chunk
            if len(self._buffer) > _MAX_MESSAGE:
                return "malformed"
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # the program can write here: anything may come
            return "malformed"
        return message if isinstance(message, dict) else "malformed"

    def _send(self, message: dict[str, Any], deadline: float) -> bool:
        data = (json.dumps(message) + "\n").encode()
        while data:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.to_runner], [], left)[1]:
                return False
            try:
                data = data[os.write(self.to_runner, data) :]
            except BrokenPipeError:
                return False
        return True

    def talk(self, deadline: float) -> dict[str, Any]:
        """{"passed": bool, "end": what ended it, "detail": the runner's words, "stop": bool}."""
        test = {"test": self.test, "equal": self.equal}
        for expected, reply in (("loaded", test), ("ran", {"nonce": self.nonce})):
            message = self._receive(deadline)
            if isinstance(message, str):
                return {"passed": False, "end": message, "stop": message == "malformed"}
            event = message.get("event")
            if event != expected:
                if isinstance(event, str) and (event in _RAISED or event == "exit"):
                    detail = message.get("detail")  # the runner's words, or the program's
                    return {"passed": False, "end": event, "detail": str(detail)[:300]}
                return {"passed": False, "end": "malformed", "stop": True}
            if not self._send(reply, deadline):
                return {"passed": False, "end": "timeout"}
        message = self._receive(deadline)
        if isinstance(message, str):
            return {"passed": False, "end": message, "stop": message == "malformed"}
        passed = message == {"event": "passed", "nonce": self.nonce}
        return {"passed": passed, "end": "passed" if passed else "malformed", "stop": not passed}

    def close(self) -> None:
        for fd in (self.from_runner, self.to_runner):
            os.close(fd)


def _signal_outcome(res: RunResult) -> str | None:
    rc = res.returncode
    if res.timed_out or rc in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"
    if rc == -signal.SIGXFSZ or "File too large" in res.stderr:
        return "output_limit"
    return None


def _stdio_outcome(res: RunResult, expected: str) -> str:
    if (by_signal := _signal_outcome(res)) is not None:
        return by_signal
    if "MemoryError" in res.stderr or "Cannot allocate memory" in res.stderr:
        return "memory_limit"
    if res.returncode != 0:
        return "runtime_error"
    return "ok" if _same_output(res.stdout, expected) else "wrong_answer"


def _assert_outcome(res: RunResult, talk: dict[str, Any]) -> str:
    if talk.get("passed"):
        return "ok"
    end = talk.get("end")
    if end in _RAISED:
        return _RAISED[end]
    if end == "exit":
        return "early_exit"
    if end == "malformed":
        return "protocol_violation"
    if (by_signal := _signal_outcome(res)) is not None:
        return by_signal
    return "early_exit"  # the process ended before the test code returned


def _run_one(program: str, test: dict[str, Any], limits: Limits, workdir: Path, mechanism: str):
    if "assert" not in test:
        res, _ = run_program(program, str(test.get("stdin", "")), limits, workdir, mechanism)
        return res, _stdio_outcome(res, test.get("expected_stdout", "")), None
    talk = _Conversation(test["assert"])
    try:
        res, said = run_program(
            program,
            "",
            limits,
            workdir,
            mechanism,
            runner=(RUNNER, talk.runner_config()),
            pass_fds=talk.child_fds(),
            during=talk.talk,
        )
    finally:
        talk.close()
    return res, _assert_outcome(res, said), said.get("detail")


def prepare(limits: Limits) -> str:
    """Once per worker: bind it to its rollout job and sweep what killed jobs left
    (sandbox_cleanup); then the mechanism to use (bubblewrap's probe is cached)."""
    sandbox_cleanup.prepare_worker(kill_uid)
    return choose_mechanism(limits)


def run_tests(program: str, tests: list[dict[str, Any]], limits_dict: dict[str, Any]) -> dict:
    """Runs in a worker process. Each test is {"stdin", "expected_stdout"} or {"assert": code}.

    Stops at the first failing test. Returns {"passed", "total", "failure", "failed_test",
    "stderr_tail", "sandbox", "tests": [...]}; raises SandboxError only if the sandbox broke.
    """
    limits = Limits(**limits_dict)
    mechanism = prepare(limits)
    results: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    sandbox: dict[str, Any] = {"mechanism": mechanism}
    # why auto fell back (e.g. bwrap not installed), so a profile can tell weaker sandboxes
    fallback_reason = (
        bwrap_works(sandbox_python(limits, "bubblewrap"))
        if (mechanism == "launcher" and limits.sandbox == "auto")
        else None
    )
    root = sandbox_cleanup.scratch_root()
    try:
        for i, test in enumerate(tests):
            workdir = root / str(i)
            workdir.mkdir()
            res, outcome, detail = _run_one(program, test, limits, workdir, mechanism)
            sandbox = {
                **res.sandbox,
                **({"fallback_reason": fallback_reason} if fallback_reason else {}),
            }
            results.append({"outcome": outcome, "wall_s": res.wall_s, "returncode": res.returncode})
            shutil.rmtree(workdir, ignore_errors=True)
            if outcome != "ok":
                failure = {
                    "failure": outcome,
                    "failed_test": i,
                    "violation": _violation(res.stderr + (detail or "")),
                    "detail": detail,
                    "stderr_tail": res.stderr[-600:],
                    "stdout_head": res.stdout[:300],
                }
                break
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {
        "passed": sum(r["outcome"] == "ok" for r in results),
        "total": len(tests),
        "sandbox": sandbox,
        "tests": results,
    }
    out.update(failure or {"failure": None})
    return out


__all__ = ["Limits", "SandboxError", "prepare", "run_tests"]
