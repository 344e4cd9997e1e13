"""The grader's side of an assert test of any shape: runs the test code in a fresh interpreter
of its own, `python -I -S -c <_code_wire.py + this file> <config json>`, started by the harness
outside the sandbox. The program never runs here.

The test code runs as `__main__` (so unittest finds its TestCase classes). Each name it reads
without binding it and that is no builtin (`add`, `Solution`) is asked of the program's process
once; what comes back is a plain value or a handle (RemoteRef) whose calls and attributes are
computed in the program's process and come back as plain values again. The assert, unittest's
assertEqual, math.isclose and the count of what passed all run here, on data. The verdict is
one JSON line to the harness on a pipe of its own:
{"end": "ran" | "assertion" | "error" | "program_raised" | "program_gone" | "violation", ...}.
Only the standard library; no rewardprof import.
"""

import ast
import json
import os
import sys


def judge(cfg):
    channel = Channel(cfg["from_program"], cfg["to_program"], cfg["cap"])  # noqa: F821
    program = ProgramClient(channel, None)  # noqa: F821 (the harness holds the deadline)
    program.wait_loaded()
    tree = ast.parse(cfg["test"])
    module = type(sys)("__main__")
    namespace = module.__dict__
    for name in free_names(tree):  # noqa: F821
        try:
            namespace[name] = program.name(name)
        except ProgramRaised:  # noqa: F821 (not defined there: the test's NameError says so)
            continue
    sys.modules["__main__"] = module
    sys.argv = ["test"]
    exec(compile(tree, "<test>", "exec", dont_inherit=True, optimize=0), namespace)


def main():
    cfg = json.loads(sys.argv[1])
    verdict = {"end": "ran"}
    try:
        judge(cfg)
    except ProgramRaised as exc:  # noqa: F821 (raised by the program's code, not by the test)
        verdict = {"end": "program_raised", "kind": exc.kind, "detail": exc.detail}
    except ChannelClosed:  # noqa: F821 (the program's process ended while being asked)
        verdict = {"end": "program_gone"}
    except WireViolation as exc:  # noqa: F821
        verdict = {"end": "violation", "what": exc.what, "detail": str(exc)}
    except AssertionError as exc:
        verdict = {"end": "assertion", "detail": f"AssertionError: {exc}"}
    except SystemExit as exc:  # unittest.main() without exit=False: its code is the verdict
        verdict = {"end": "ran"} if exc.code in (0, None, False) else {"end": "assertion"}
    except BaseException as exc:
        verdict = {"end": "error", "detail": f"{type(exc).__name__}: {exc}"}
    verdict["detail"] = str(verdict.get("detail", ""))[:300]
    os.write(cfg["verdict_fd"], (json.dumps(verdict) + "\n").encode("utf-8", "backslashreplace"))
    os._exit(0)


main()
