"""The grader's side of an assert test of any shape: runs the test code in a fresh interpreter
of its own, `python -I -S -c <_wire.py + _values.py + _remote.py + this
file>`, its config (the test among it) on stdin, never in its argv (another process's command
line is readable through /proc). Started by the harness outside the sandbox; the program never
runs here.

The namespace the test runs in (as `__main__`, so unittest finds its TestCase classes) is
built from the task, never from the program, except for the program's own names
(names.py): first the prompt's given code (its imports and helpers), then the standard
library modules and names the test uses, then the program's names, each a handle or proxy
(_remote.py) whose calls are computed in the program's process; `solution` is the
program's module for `from solution import add`. The assert, unittest's assertEqual,
math.isclose and the count of what passed all run here, on data. Every unittest result is
watched: a failure or error in any TestCase is the verdict, whatever the runner does with it.
A test that called the program not once has judged nothing. The verdict is one JSON line to
the harness on a pipe of its own: {"end": "ran" | "assertion" | "error" | "program_raised" |
"program_gone" | "violation" | "not_called" | "unjudgeable" | "task_error", ...}. Only the
standard library.
"""

import ast
import importlib
import json
import os
import sys
import unittest


class TaskError(Exception):
    """The row's own code (the prompt's, the test's) failed before judging: not the program's
    fault, so no reward of the program's."""


def watch_unittest():
    """Every TestCase outcome, whichever result class or runner the test uses."""
    watched = {"ran": 0, "failures": []}
    result = unittest.TestResult

    def wrap(method, failed):
        def recorded(self, test, *rest):
            err = rest[-1] if rest else None
            if failed and err is not None:
                watched["failures"].append(err[1] if isinstance(err, tuple) else err)
            return method(self, test, *rest)

        return recorded

    original_start = result.startTest

    def start(self, test):
        watched["ran"] += 1
        return original_start(self, test)

    result.startTest = start
    for name, failed in (("addFailure", True), ("addError", True), ("addSubTest", True)):
        setattr(result, name, wrap(getattr(result, name), failed))
    original_unexpected = result.addUnexpectedSuccess

    def unexpected(self, test):
        watched["failures"].append(AssertionError("unexpected success"))
        return original_unexpected(self, test)

    result.addUnexpectedSuccess = unexpected
    return watched


def defines_tests(value):
    """A TestCase class of the test's with test methods."""
    return (
        isinstance(value, type)
        and issubclass(value, unittest.TestCase)
        and any(name.startswith("test") for name in vars(value))
    )


def namespace_for(cfg, program):
    names = cfg["names"]
    module = type(sys)("__main__")
    namespace = module.__dict__
    sys.modules["__main__"] = module
    sys.modules["solution"] = SolutionModule(program)  # noqa: F821 (_remote.py)
    if names["given"]:
        try:
            exec(compile(names["given"], "<prompt>", "exec", dont_inherit=True), namespace)
        except Exception as exc:  # the row's code: nothing of the program has run here yet
            raise TaskError(f"the prompt's code failed: {type(exc).__name__}: {exc}") from None
    for name in names["modules"]:
        try:
            namespace[name] = importlib.import_module(name)
        except ImportError:  # no such module here: the test's NameError says so
            continue
    for name, module_name in names["exports"].items():
        namespace[name] = getattr(importlib.import_module(module_name), name)
    for name in names["program"]:
        try:
            namespace[name] = program.name(name)
        except ProgramRaised:  # noqa: F821 (not defined there: the test's NameError says so)
            continue
    for name in names["maybe"]:
        if program.defines(name):
            namespace[name] = program.name(name)
    return namespace


def judge(cfg):
    channel = Channel(cfg["from_program"], cfg["to_program"], cfg["cap"])  # noqa: F821
    program = ProgramClient(channel, None)  # noqa: F821 (the harness holds the deadline)
    try:
        tree = ast.parse(cfg["test"])
    except (SyntaxError, ValueError) as exc:
        raise TaskError(f"the test is not Python: {exc}") from None
    program.wait_loaded()
    watched = watch_unittest()
    namespace = namespace_for(cfg, program)
    sys.argv = ["test"]
    try:
        exec(compile(tree, "<test>", "exec", dont_inherit=True, optimize=0), namespace)
    except SystemExit as exc:  # unittest.main() without exit=False: the watched results rule
        if exc.code not in (0, None, False) and not watched["failures"]:
            raise AssertionError(f"the test exited with {exc.code!r}") from None
    if watched["failures"]:
        raise watched["failures"][0]
    if watched["ran"] == 0 and any(defines_tests(v) for v in list(namespace.values())):
        return {"end": "not_called", "detail": "the test's unittest.TestCase classes never ran"}
    if program.calls == 0:
        return {"end": "not_called", "detail": "the test called no function of the program"}
    return {"end": "ran"}


def main():
    cfg = json.loads(sys.stdin.buffer.read())
    try:
        verdict = judge(cfg)
    except ProgramRaised as exc:  # noqa: F821 (raised by the program's code, not by the test)
        verdict = {"end": "program_raised", "kind": exc.kind, "detail": exc.detail}
    except ChannelClosed:  # noqa: F821 (the program's process ended while being asked)
        verdict = {"end": "program_gone"}
    except WireViolation as exc:  # noqa: F821
        verdict = {"end": "violation", "what": exc.what, "detail": str(exc)}
    except AssertionError as exc:
        verdict = {"end": "assertion", "detail": f"AssertionError: {exc}"}
    except TaskError as exc:
        verdict = {"end": "task_error", "detail": str(exc)}
    except Unjudgeable as exc:  # noqa: F821
        verdict = {"end": "unjudgeable", "detail": str(exc)}
    except BaseException as exc:
        verdict = {"end": "error", "detail": f"{type(exc).__name__}: {exc}"}
    try:
        verdict["detail"] = str(verdict.get("detail", ""))[:300]
    except Exception:  # a detail that cannot be made text (a huge int): its type is enough
        verdict["detail"] = "(detail not printable)"
    os.write(cfg["verdict_fd"], (json.dumps(verdict) + "\n").encode("utf-8", "backslashreplace"))
    os._exit(0)


main()
