"""The code tests: each test runs the program in a fresh sandbox; the verdict is formed outside.

`run_tests` runs in a verification worker process (never on the event loop). A test is either
- stdin/stdout: the program runs as a script with the test's stdin; its stdout, read outside
  the sandbox after every process of the sandbox is gone, is compared line by line with the
  expected output (trailing whitespace ignored); it must exit 0; or
- assert: the program is loaded as a module by the runner (_runner.py), which only
  computes: it answers requests for its names, calls and attributes with plain values over a
  pipe (the wire, _wire.py: JSON, each message at most `max_output_bytes`, enforced while
  reading). No test code, expected value or verdict ever enters its process. A value-shaped
  test (asserts.py: asserts over calls of the program's functions) is evaluated here, in
  the harness; any other test code runs in a fresh interpreter of its own (_judge.py),
  whose names of the program are handles to that process. The test's outcome is the
  harness's or the judge's: exit status, stdout, anything printed or written plays no part.
docs/environments.md lists which shapes are judged which way and what stays trusted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from rewardprof.environments.code._remote import ProgramClient, ProgramRaised, Unjudgeable
from rewardprof.environments.code._wire import Channel, ChannelClosed, WireViolation
from rewardprof.environments.code.asserts import judge_values, value_plan
from rewardprof.environments.code.names import TaskNames
from rewardprof.environments.sandbox import (
    Limits,
    RunResult,
    SandboxError,
    choose_mechanism,
    cleanup,
    kill_uid,
    memory,
    run_program,
    sandbox_python,
)
from rewardprof.environments.sandbox.bwrap import bwrap_works

log = logging.getLogger("rewardprof.environments.code")
_HERE = Path(__file__).parent
_WIRE = (_HERE / "_wire.py").read_text() + (_HERE / "_values.py").read_text()
RUNNER = _WIRE + (_HERE / "_runner.py").read_text()
JUDGE = _WIRE + (_HERE / "_remote.py").read_text() + (_HERE / "_judge.py").read_text()
_RAISED = {"error": "runtime_error", "memory": "memory_limit", "exit": "early_exit"}
_WIRE_FAULT = {"oversized": "output_limit", "malformed": "protocol_violation"}
_JUDGE_END = {
    "ran": "ok",
    "assertion": "wrong_answer",
    "error": "runtime_error",
    "not_called": "not_called",
    "unjudgeable": "unjudgeable",
}
_NOT_CALLED = "the test called no function of the program"
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


def clean_text(text: Any, limit: int) -> str:
    """Text from the program made storable: no lone surrogates, no NULs, at most `limit`
    characters (so a program's fault is always its reward 0, never an unwritable record)."""
    text = str(text)[: limit * 2]
    text = text.encode("utf-8", "replace").decode("utf-8", "replace").replace("\0", "\\0")
    return text[:limit]


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


def _judged(fault: BaseException) -> dict[str, Any]:
    """A test's outcome from what ended its evaluation here."""
    if isinstance(fault, AssertionError):
        return {"outcome": "wrong_answer", "detail": f"AssertionError: {fault}", "stop": True}
    if isinstance(fault, ProgramRaised):
        return {"outcome": _RAISED[fault.kind], "detail": fault.detail, "stop": True}
    if isinstance(fault, ChannelClosed):  # how it ended is read from the sandbox's report
        return {"outcome": "gone" if fault.what == "eof" else "timeout"}
    if isinstance(fault, WireViolation):
        return {"outcome": _WIRE_FAULT[fault.what], "detail": str(fault), "stop": True}
    if isinstance(fault, Unjudgeable):
        return {"outcome": "unjudgeable", "detail": f"{fault}", "stop": True}
    # the test met a value it cannot use (a program object where data was due, a wrong type)
    return {"outcome": "runtime_error", "detail": f"{type(fault).__name__}: {fault}", "stop": True}


class _AssertTest:
    """The harness's side of one assert test: the pipes to the runner, and its judge."""

    def __init__(self, test: str, names: TaskNames, cap: int):
        self.test, self.names, self.cap = test, names, cap
        self.plan = value_plan(test, names)
        self.from_program, self.program_out = os.pipe()
        self.program_in, self.to_program = os.pipe()
        self.shape = "values" if self.plan is not None else "judge"

    def runner_config(self) -> dict[str, int]:
        return {"to_harness": self.program_out, "from_harness": self.program_in, "cap": self.cap}

    def child_fds(self) -> tuple[int, int]:
        return (self.program_out, self.program_in)

    def talk(self, deadline: float) -> dict[str, Any]:
        """{"outcome", "detail", "stop"}: "stop" once the verdict is in (the program is then
        stopped); outcome "gone" when the program's process ended first."""
        try:
            if self.plan is not None:
                program = ProgramClient(
                    Channel(self.from_program, self.to_program, self.cap), deadline
                )
                program.wait_loaded()
                if judge_values(self.plan, program, self.names) == 0:
                    return {"outcome": "not_called", "detail": _NOT_CALLED, "stop": True}
                return {"outcome": "ok", "stop": True}
            return self._judge_elsewhere(deadline)
        except SandboxError:
            raise
        except Exception as exc:
            return _judged(exc)

    def _judge_elsewhere(self, deadline: float) -> dict[str, Any]:
        verdict_r, verdict_w = os.pipe()
        cfg = {
            "from_program": self.from_program,
            "to_program": self.to_program,
            "verdict_fd": verdict_w,
            "cap": self.cap,
            "test": self.test,
            "names": self.names.as_dict(),
        }
        # the config (the test) on stdin: a command line is readable by any process
        judge = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", JUDGE],
            pass_fds=(self.from_program, self.to_program, verdict_w),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(verdict_w)
        try:
            with judge.stdin:
                judge.stdin.write(json.dumps(cfg).encode())
            verdict = Channel(verdict_r, -1, 1 << 16).receive(deadline)
        except ChannelClosed as exc:
            if exc.what == "timeout":
                return {"outcome": "timeout"}
            raise SandboxError("the test's judge ended without a verdict") from None
        except BrokenPipeError:
            raise SandboxError("the test's judge ended before it read its test") from None
        finally:
            os.close(verdict_r)
            os.killpg(judge.pid, signal.SIGKILL)
            judge.wait()
        end, detail = verdict.get("end"), verdict.get("detail") or None
        if end == "task_error":  # the row's code: a verifier_error, never the program's 0
            raise SandboxError(f"the row's code failed in the judge: {detail}")
        if end in _JUDGE_END:
            return {"outcome": _JUDGE_END[end], "detail": detail, "stop": True}
        if end == "program_raised":
            return {
                "outcome": _RAISED.get(verdict.get("kind"), "runtime_error"),
                "detail": detail,
                "stop": True,
            }
        if end == "violation":
            return {
                "outcome": _WIRE_FAULT.get(verdict.get("what"), "protocol_violation"),
                "detail": detail,
                "stop": True,
            }
        return {"outcome": "gone"}

    def close(self) -> None:
        for fd in (self.from_program, self.to_program):
            os.close(fd)


def _signal_outcome(res: RunResult) -> str | None:
    rc = res.returncode
    if res.timed_out or rc in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"
    if rc == -signal.SIGXFSZ or "File too large" in res.stderr:
        return "output_limit"
    return None


def _ended_outcome(res: RunResult) -> str | None:
    """What stopped the program, whatever the test: a kill, a full file, memory."""
    if res.sandbox.get("memory_oom"):
        return "memory_limit"  # the sandbox's memory cgroup killed one of its processes
    if (by_signal := _signal_outcome(res)) is not None:
        return by_signal
    if "MemoryError" in res.stderr or "Cannot allocate memory" in res.stderr:
        return "memory_limit"
    return None


def _stdio_outcome(res: RunResult, expected: str) -> str:
    if (ended := _ended_outcome(res)) is not None:
        return ended
    if res.returncode != 0:
        return "runtime_error"
    return "ok" if _same_output(res.stdout, expected) else "wrong_answer"


def _assert_outcome(res: RunResult, talk: dict[str, Any]) -> str:
    if res.sandbox.get("memory_oom"):
        return "memory_limit"
    if talk["outcome"] not in ("gone", "timeout"):
        return talk["outcome"]
    if talk["outcome"] == "timeout":
        return "timeout"
    return _ended_outcome(res) or "early_exit"  # it ended before the test was judged


def _run_one(program: str, test: dict[str, Any], limits: Limits, workdir: Path, mechanism: str):
    if "assert" not in test:
        res, _ = run_program(program, str(test.get("stdin", "")), limits, workdir, mechanism)
        return res, _stdio_outcome(res, test.get("expected_stdout", "")), None
    talk = _AssertTest(test["assert"], TaskNames(**test["names"]), limits.max_output_bytes)
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
    res.sandbox["test_shape"] = talk.shape
    return res, _assert_outcome(res, said), said.get("detail")


def prepare(limits: Limits) -> str:
    """Once per worker: bind it to its rollout job and sweep what killed jobs left
    (sandbox.cleanup, sandbox.memory); then the mechanism to use (bubblewrap's probe is
    cached), said in the job's log with how memory_mb is enforced."""
    first = not cleanup.swept()
    cleanup.prepare_worker(kill_uid)
    mechanism = choose_mechanism(limits)
    if first:
        memory.sweep_stale()
        enforced = (
            "one memory cgroup per sandbox"
            if memory.available()
            else "per process (RLIMIT_AS): no writable cgroup v1 memory controller"
        )
        log.info("code sandbox: %s; memory_mb %d: %s", mechanism, limits.memory_mb, enforced)
    return mechanism


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
    root = cleanup.scratch_root()
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
                    "detail": clean_text(detail, 300) if detail else None,
                    "stderr_tail": clean_text(res.stderr[-600:], 600),
                    "stdout_head": clean_text(res.stdout[:300], 300),
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
