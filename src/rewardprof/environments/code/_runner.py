"""The program's side of an assert test: runs in the sandbox as
`python -I -c <_wire.py + _values.py + this file> <config json>`. It only computes.

It loads the program as a module named `solution` (so an `if __name__ == "__main__":` block does
not run), says {"event": "loaded"} (or how loading failed), then answers requests from the grader
until the grader hangs up:

    {"op": "name", "name": "add"}                 -> the value bound to that name
    {"op": "call", "ref": n, "args": [...], "kwargs": [[k, v], ...]} -> what the call returned
    {"op": "attr", "ref": n, "name": "push"}      -> the attribute's value
    {"op": "defines", "name": "sum"}               -> whether the program binds that name
    {"op": "special", "ref": n, "name": "str"|"repr"|"len"|"iter"|"getitem", "args"}
    {"op": "next", "ref": n, "count": k}          -> up to k more items of an iterator
    answers: {"value": <wire value>} or {"raised": "error"|"memory"|"exit", "type", "detail"}

No test code, no expected value and no verdict ever enters this process: the grader
(harness.py, or _judge.py for test code of any shape) compares outside. Whatever
the program does here (rebinding builtins, patching modules, tracing, walking the stack,
writing to the pipes itself) changes only the values it sends, never how they are judged.
Only the standard library; no rewardprof import.
"""

import builtins
import collections.abc
import json
import os
import sys

objects = []  # what the grader holds a handle to, by number
numbers = {}  # id(object) -> its number: one handle per object, so a class is one proxy
infos = {}  # id(class) -> its class info


def handle(value):
    if id(value) not in numbers:
        objects.append(value)
        numbers[id(value)] = len(objects) - 1
    return numbers[id(value)]


def class_info(cls, depth=0):
    """[handle, qualified name, the program's bases' infos, the builtin exception it is]."""
    if id(cls) not in infos:
        bases = [b for b in cls.__bases__ if b.__module__ != "builtins"] if depth < 16 else []
        exc = [k.__name__ for k in cls.__mro__ if k.__module__ == "builtins"]
        exc = next((n for n in exc if isinstance(getattr(builtins, n, None), type)), None)
        if not issubclass(cls, BaseException):
            exc = None
        infos[id(cls)] = [
            handle(cls),
            str(cls.__qualname__),
            [class_info(b, depth + 1) for b in bases],
            exc,
        ]
    return infos[id(cls)]


def refer(value):
    """What is not data: the grader gets a handle to it (see _remote.py)."""
    if isinstance(value, type) and value.__module__ != "builtins":
        return {"class": class_info(value)}
    if isinstance(value, collections.abc.Iterator):
        return {"iter": handle(value)}
    if isinstance(value, type) or type(value).__module__ == "builtins":
        return {"ref": handle(value)}  # functions, methods, modules, builtin types
    return {"object": [handle(value), class_info(type(value))]}


def resolve(tag, inner):
    if tag != "ref":
        return None
    if type(inner) is not int or not 0 <= inner < len(objects):
        raise KeyError(f"no object {inner}")
    return objects[inner]


def take(iterator, count):
    items = []
    for item in iterator:
        items.append(item)
        if len(items) >= count:
            break
    return items


SPECIAL = {"str": str, "repr": repr, "len": len, "iter": iter, "getitem": lambda o, k: o[k]}


def compute(request, namespace):
    op = request.get("op")
    decoder = Decoder(resolve, None, "solution")  # noqa: F821 (_values.py)
    args = [decoder.decode(a) for a in request.get("args", [])]
    kwargs = {k: decoder.decode(v) for k, v in request.get("kwargs", [])}
    if op == "name":
        if request["name"] not in namespace:
            raise NameError(f"name {request['name']!r} is not defined by the program")
        return namespace[request["name"]]
    if op == "defines":
        return request["name"] in namespace
    target = resolve("ref", request.get("ref"))
    if op == "attr":
        return getattr(target, request["name"])
    if op == "call":
        return target(*args, **kwargs)
    if op == "special" and request.get("name") in SPECIAL:
        return SPECIAL[request["name"]](target, *args)
    if op == "next" and type(request.get("count")) is int:
        return take(target, max(1, min(request["count"], 256)))
    raise ValueError(f"unknown request {op!r}")


def failure(exc):
    """How the program's code failed, as the grader is told (its own words, cut)."""
    kind = "memory" if isinstance(exc, MemoryError) else "error"
    if isinstance(exc, SystemExit):
        return {"raised": "exit", "type": "SystemExit", "detail": f"SystemExit: {exc.code!r}"[:300]}
    answer = {
        "raised": kind,
        "type": type(exc).__name__,
        "detail": f"{type(exc).__name__}: {exc}"[:300],
    }
    if type(exc).__module__ != "builtins":  # the program's own class: the grader proxies it
        try:
            info = class_info(type(exc))
        except Exception:  # a class whose names cannot be read: its type name then
            info = None
        if info is not None:
            answer["class"] = info
    return answer


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
