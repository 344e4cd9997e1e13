"""The assert-test runner: runs as `python -I -c <this file's text> <config json>` in the sandbox.

It loads the program as a module named `solution` (so an `if __name__ == "__main__":` block,
e.g. `sys.exit(main())`, does not run; the test code then runs as `__main__` in the same
namespace, so a guard around the tests does not skip them), then takes part in a
conversation with the harness (rewardprof.environments.code_harness, outside the sandbox)
over two pipes:

    runner -> harness  {"event": "loaded"}          the program's module code has finished
    harness -> runner  {"test": "<code>", "equal": "<name>"}  only now is the test code in here
    runner -> harness  {"event": "ran"}             the test code returned without an exception
    harness -> runner  {"nonce": "<hex>"}           this test's nonce, made and kept outside
    runner -> harness  {"event": "passed", "nonce": "<hex>"}

A test passes only when that exact sequence arrives with the nonce the harness sent for this
test: exiting early (`os._exit(0)`, `SystemExit`, `sys.exit(main())`), an exception, or a
message out of order (a printed or written "pass") is not a pass. The nonce only enters this
process after the test code returned. The runner keeps its own references to what it uses
(`compile`, `exec`, `json`, `os.write`) taken before the program runs, compiles the test with
asserts on (`optimize=0`), and gives the test code the builtins as they were before the program
ran, so rebinding `builtins.*` cannot change what the test sees. The harness rewrites every
`a == b` of the test code into a call of `_equal` (under a name it picks per test): a value
whose `==` also holds for a changed copy of the other side (`__eq__` always true) fails.
Only the standard library; no rewardprof import.
"""

import builtins
import json
import os
import sys

_compile, _exec, _dumps, _loads = compile, exec, json.dumps, json.loads
_write, _read, _exit, _type = os.write, os.read, os._exit, type
_BaseException, _AssertionError, _SystemExit = BaseException, AssertionError, SystemExit
_MemoryError, _Module = MemoryError, type(sys)
_bool, _iter, _next = bool, iter, next
_int, _float, _complex, _str, _bytes = int, float, complex, str, bytes
_list, _tuple, _dict, _set, _frozenset = list, tuple, dict, set, frozenset
_PRISTINE_BUILTINS = dict(builtins.__dict__)
_NO_PROBE = object()


class _Unseen:
    """A value the program has never seen: no honest == says it equals it."""


def _perturbed(value, depth=0):
    """A value of the same plain type that differs from `value` (in its first element for
    containers), or _NO_PROBE for any other type."""
    kind = _type(value)
    if kind is _bool:
        return not value
    if kind is _int or kind is _complex:
        return value + 1
    if kind is _float:
        bigger = value + 1.0
        return bigger if bigger != value and value == value else _Unseen()  # inf, nan
    if kind is _str or kind is _bytes:
        return value + (b"\0" if kind is _bytes else "\0")
    if value is None:
        return _Unseen()
    if kind is _list or kind is _tuple:
        if value and depth < 20:
            first = _perturbed(value[0], depth + 1)
            if first is not _NO_PROBE:
                return kind([first, *value[1:]])
        return kind([*value, _Unseen()])
    if kind is _dict:
        if value and depth < 20:
            key = _next(_iter(value))
            first = _perturbed(value[key], depth + 1)
            if first is not _NO_PROBE:
                return {**value, key: first}
        return {**value, _Unseen(): 0}
    if kind is _set or kind is _frozenset:
        return kind([*value, _Unseen()])
    return _NO_PROBE


def _equal(left, right):
    """`left == right` for the test code, refusing a rigged __eq__: when it holds, it must not
    also hold with either plain side changed (as it would for an object equal to anything)."""
    equal = _bool(left == right)
    if equal:
        for a, b in ((left, _perturbed(right)), (_perturbed(left), right)):
            if a is not _NO_PROBE and b is not _NO_PROBE and _bool(a == b):
                raise _AssertionError("== also holds for a different value: rigged __eq__")
    return equal


def main():
    cfg = _loads(sys.argv[1])
    to_harness, from_harness = cfg["to_harness"], cfg["from_harness"]
    sys.argv = ["main.py"]
    buffer = [b""]

    def send(message):
        _write(to_harness, (_dumps(message) + "\n").encode())

    def receive():
        while b"\n" not in buffer[0]:
            chunk = _read(from_harness, 1 << 16)
            if not chunk:
                _exit(0)  # the harness hung up: nothing more to do
            buffer[0] += chunk
        line, buffer[0] = buffer[0].split(b"\n", 1)
        return _loads(line)

    def fail(phase, exc):
        if isinstance(exc, _SystemExit):
            send({"event": "exit", "phase": phase, "code": repr(exc.code)[:100]})
        else:
            kind = "assertion" if isinstance(exc, _AssertionError) else "error"
            if isinstance(exc, _MemoryError):
                kind = "memory"
            detail = f"{_type(exc).__name__}: {exc}"[:300]
            send({"event": kind, "phase": phase, "detail": detail})
        _exit(1)

    with open(cfg["program"], encoding="utf-8") as f:
        source = f.read()
    module = _Module("solution")  # a real module: sys.modules can name it (unittest looks)
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    sys.modules["solution"] = module
    try:
        _exec(_compile(source, "main.py", "exec", dont_inherit=True, optimize=0), namespace)
    except _BaseException as exc:  # the program's fault: reported, never a pass
        fail("load", exc)
    send({"event": "loaded"})
    message = receive()
    test = message["test"]
    namespace["__builtins__"] = {**_PRISTINE_BUILTINS, message["equal"]: _equal}
    namespace["__name__"] = "__main__"  # test code under a main guard runs (the program's did not)
    sys.modules["__main__"] = module
    try:
        _exec(_compile(test, "<test>", "exec", dont_inherit=True, optimize=0), namespace)
    except _BaseException as exc:
        fail("test", exc)
    send({"event": "ran"})
    send({"event": "passed", "nonce": receive()["nonce"]})
    _exit(0)


main()
