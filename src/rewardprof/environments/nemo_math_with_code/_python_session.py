# ruff: noqa: S102, S307
"""The stateful Python tool's program, run in the sandbox once per call (math_with_code).

The environment (this package's __init__.py) runs this file's text with `python -I` in the
sandbox (importing it runs nothing). It reads its request from stdin: {"cells": earlier code,
"code": this call's, "timeout_s", "packages", "max_chars"}; writes "ready" once numpy, scipy and
pandas are loaded; rebuilds the episode's interpreter state by running the earlier cells again,
their output discarded; runs this call's code; and writes one JSON line last on stdout:
{"stdout", "stderr", "result", "error_message"}.

The interpreter is NeMo Gym's python executor's (resources_servers/math_with_code/app.py):
exec(code, globals, locals) with the same few builtins, numpy/scipy/pandas bound as np, scipy,
pd, a SIGALRM per call, and the value of the last line when it is a bare expression. Imports
are limited to the standard library and those three packages: the tool offers nothing else
(NeMo Gym's server has nothing else installed).
"""

import contextlib
import io
import json
import os
import signal
import sys

_NOT_AN_EXPRESSION = ("print", "import", "from", "def", "class", "if", "for", "while", "try")
_IMPORTABLE = set(sys.stdlib_module_names) | {"numpy", "scipy", "pandas"}
_real_import = __import__


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.split(".")[0]
    if level == 0 and top not in _IMPORTABLE:
        raise ModuleNotFoundError(f"No module named '{top}'")
    return _real_import(name, globals, locals, fromlist, level)


def _namespace():
    """NeMo Gym's globals for the model's code (numpy & co. loaded one thread each, so the
    sandbox's process and memory limits hold)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    import numpy as np  # lazy: after the thread settings above
    import pandas as pd  # lazy: after the thread settings above
    import scipy  # lazy: after the thread settings above

    builtins = {
        "print": print,
        "len": len,
        "str": str,
        "int": int,
        "float": float,
        "list": list,
        "dict": dict,
        "tuple": tuple,
        "set": set,
        "min": min,
        "max": max,
        "sum": sum,
        "abs": abs,
        "range": range,
        "enumerate": enumerate,
        "zip": zip,
        "__import__": _import,
    }
    return {"__builtins__": builtins, "np": np, "numpy": np, "scipy": scipy, "pd": pd, "pandas": pd}


def _timed_out(signum, frame):
    raise TimeoutError("code timed-out")


def _last_value(code, globals_, locals_):
    lines = code.strip().split("\n")
    last = lines[-1].strip() if lines else ""
    if not last or last.startswith((*_NOT_AN_EXPRESSION, "with")):
        return None
    try:
        return str(eval(last, globals_, locals_))
    except Exception:  # not a bare expression, or it fails: no value, as NeMo Gym's tool
        return None


def run_cell(code, timeout_s, globals_, locals_):
    """(stdout, stderr, result) of one cell; raises what the cell raised."""
    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(timeout_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(code, globals_, locals_)
            result = _last_value(code, globals_, locals_)
    finally:
        signal.alarm(0)
    return out.getvalue(), err.getvalue(), result


def _cut(text, n):
    # the episode cuts a tool's output to max_tool_output_chars anyway: what goes past it is
    # said, not carried (a cell printing 100 MB still answers)
    if text is None or len(text) <= n:
        return text
    return text[:n] + f"\n[... {len(text) - n} characters cut by rewardprof]"


def main():
    request = json.loads(sys.stdin.read())
    sys.path.extend(request["packages"])
    globals_, locals_ = _namespace(), {}
    sys.__stdout__.write("ready\n")
    sys.__stdout__.flush()
    for earlier in request["cells"]:
        try:
            run_cell(earlier, request["timeout_s"], globals_, locals_)
        except Exception as exc:  # its answer was given when it first ran; its state stays
            del exc
    try:
        stdout, stderr, result = run_cell(request["code"], request["timeout_s"], globals_, locals_)
        answer = {"stdout": stdout, "stderr": stderr, "result": result, "error_message": None}
    except Exception as exc:
        answer = {"stdout": "", "stderr": "", "result": None, "error_message": str(exc)}
    answer = {key: _cut(value, request["max_chars"]) for key, value in answer.items()}
    sys.__stdout__.write("\n" + json.dumps(answer) + "\n")
    sys.__stdout__.flush()


if __name__ == "__main__":
    main()
