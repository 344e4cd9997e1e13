"""The program's side of an assert test: runs in the sandbox as
`python -I -c <_code_wire.py + this file> <config json>`. It only computes.

It loads the program as a module named `solution` (so an `if __name__ == "__main__":` block does
not run), says {"event": "loaded"} (or how loading failed), then answers requests from the grader
until the grader hangs up:

    {"op": "name", "name": "add"}                 -> the value bound to that name
    {"op": "call", "ref": n, "args": [...], "kwargs": [[k, v], ...]} -> what the call returned
    {"op": "attr", "ref": n, "name": "push"}      -> the attribute's value
    answers: {"value": <wire value>} or {"raised": "error"|"memory"|"exit", "type", "detail"}

No test code, no expected value and no verdict ever enters this process: the grader
(code_harness.py, or _code_judge.py for test code of any shape) compares outside. Whatever
the program does here (rebinding builtins, patching modules, tracing, walking the stack,
writing to the pipes itself) changes only the values it sends, never how they are judged.
Only the standard library; no rewardprof import.
"""

import builtins
import json
import os
import sys

objects = []  # what the grader holds a handle to, by number


def refer(value):
    objects.append(value)
    return len(objects) - 1


def resolve(n):
    if type(n) is not int or not 0 <= n < len(objects):
        raise KeyError(f"no object {n}")
    return objects[n]


def compute(request, namespace):
    op = request.get("op")
    if op == "name":
        if request["name"] not in namespace:
            raise NameError(f"name {request['name']!r} is not defined by the program")
        return namespace[request["name"]]
    if op == "attr":
        return getattr(resolve(request["ref"]), request["name"])
    if op == "call":
        args = [decode(a, resolve) for a in request["args"]]  # noqa: F821 (_code_wire.py)
        kwargs = {k: decode(v, resolve) for k, v in request["kwargs"]}  # noqa: F821
        return resolve(request["ref"])(*args, **kwargs)
    raise ValueError(f"unknown request {op!r}")


def failure(exc):
    """How the program's code failed, as the grader is told (its own words, cut)."""
    kind = "memory" if isinstance(exc, MemoryError) else "error"
    if isinstance(exc, SystemExit):
        return {"raised": "exit", "type": "SystemExit", "detail": f"SystemExit: {exc.code!r}"[:300]}
    return {
        "raised": kind,
        "type": type(exc).__name__,
        "detail": f"{type(exc).__name__}: {exc}"[:300],
    }


def serve(channel, namespace):
    while True:
        try:
            request = channel.receive(None)
        except ChannelClosed:  # noqa: F821 (the grader hung up: nothing more to compute)
            return
        try:
            answer = {"value": encode(compute(request, namespace), refer)}  # noqa: F821
        except BaseException as exc:  # the program's fault, reported as data
            answer = failure(exc)
        channel.send(answer, None)


def main():
    cfg = json.loads(sys.argv[1])
    sys.argv = ["main.py"]
    channel = Channel(cfg["from_harness"], cfg["to_harness"], cfg["cap"])  # noqa: F821
    with open(cfg["program"], encoding="utf-8") as f:
        source = f.read()
    module = type(sys)("solution")
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    sys.modules["solution"] = module
    loaded = {"event": "loaded"}
    try:
        exec(compile(source, "main.py", "exec", dont_inherit=True), namespace)
    except MemoryError:
        loaded = {"event": "memory", "type": "MemoryError", "detail": "MemoryError"}
    except SystemExit as exc:
        loaded = {
            "event": "exit",
            "type": "SystemExit",
            "detail": f"SystemExit: {exc.code!r}"[:300],
        }
    except BaseException as exc:
        detail = f"{type(exc).__name__}: {exc}"[:300]
        loaded = {"event": "error", "type": type(exc).__name__, "detail": detail}
    channel.send(loaded, None)
    if loaded["event"] == "loaded":
        serve(channel, namespace)
    os._exit(0)


main()
