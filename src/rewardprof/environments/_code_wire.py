"""The wire between a program and its grader: values as plain JSON, one line per message.

Stdlib only and self-contained: the harness imports it; its text is also prepended to the two
scripts that speak it in other processes (`_sandbox_runner.py` in the sandbox, the program's
side; `_code_judge.py`, the grader's side for test code of any shape).

A value crosses as JSON: null, true/false, ints, floats (NaN and infinities as JSON's
extensions), strings and lists as themselves; a tuple, set, frozenset, dict, bytes or complex as
a one-key object ({"tuple": [...]}, {"dict": [[key, value], ...]}, {"bytes": "<hex>"}, ...);
anything else as {"ref": n}, a handle to an object that stays in the program's process. A
subclass of a plain type (a Counter, a namedtuple, an int with its own __eq__) is reduced to
its base type: what arrives is data, never an object with behaviour. The receiving side decodes
strictly (any other shape is a violation) and enforces the declared size cap of a message while
it reads, never after.
"""

import ast
import builtins
import json
import os
import select
import time

_TAGS = ("tuple", "set", "frozenset", "dict", "bytes", "complex", "ref")
_MAX_DEPTH = 100


class WireViolation(Exception):
    """A message that breaks the wire's rules: malformed, oversized or out of place."""

    def __init__(self, what, detail=""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what


class ChannelClosed(Exception):
    """The other side is gone (end of file) or did not answer before the deadline."""

    def __init__(self, what):
        super().__init__(what)
        self.what = what  # "eof" or "timeout"


def encode(value, refer, depth=0):
    """`value` as wire JSON; `refer(obj) -> int` registers what is not plain data."""
    if depth > _MAX_DEPTH:
        raise ValueError("value nested too deep")
    if value is None or type(value) is bool:
        return value
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value) if base is not bool else bool(int(value))
    if isinstance(value, bytes):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, complex):
        return {"complex": [complex(value).real, complex(value).imag]}
    if isinstance(value, list):
        return [encode(v, refer, depth + 1) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"tuple": [encode(v, refer, depth + 1) for v in tuple.__iter__(value)]}
    for kind in (frozenset, set):
        if isinstance(value, kind):
            items = [encode(v, refer, depth + 1) for v in kind.__iter__(value)]
            return {kind.__name__: items}
    if isinstance(value, dict):
        pairs = dict.items(value)
        return {
            "dict": [[encode(k, refer, depth + 1), encode(v, refer, depth + 1)] for k, v in pairs]
        }
    return {"ref": refer(value)}


def decode(data, resolve, depth=0):
    """Wire JSON -> a plain value (strict); `resolve(n)` gives what a {"ref": n} stands for."""
    if depth > _MAX_DEPTH:
        raise WireViolation("malformed", "value nested too deep")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, resolve, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise WireViolation("malformed", "not a wire value")
    ((tag, inner),) = data.items()
    if tag == "ref" and type(inner) is int:
        return resolve(inner)
    if tag == "bytes" and type(inner) is str:
        try:
            return bytes.fromhex(inner)
        except ValueError:
            raise WireViolation("malformed", "bytes not in hex") from None
    if tag == "complex" and type(inner) is list and len(inner) == 2:
        parts = [decode(v, resolve, depth + 1) for v in inner]
        if all(type(p) in (int, float) for p in parts):
            return complex(*parts)
    if tag in ("tuple", "set", "frozenset") and type(inner) is list:
        items = [decode(v, resolve, depth + 1) for v in inner]
        try:
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        except TypeError:  # an unhashable member
            raise WireViolation("malformed", f"{tag} of unhashable values") from None
    if tag == "dict" and type(inner) is list:
        out = {}
        for pair in inner:
            if type(pair) is not list or len(pair) != 2:
                raise WireViolation("malformed", "dict item is not a pair")
            key = decode(pair[0], resolve, depth + 1)
            try:
                out[key] = decode(pair[1], resolve, depth + 1)
            except TypeError:
                raise WireViolation("malformed", "unhashable dict key") from None
        return out
    raise WireViolation("malformed", f"unknown wire value {tag!r}"[:100])


class Channel:
    """One side of a pair of pipes carrying one JSON object per line, each at most `cap`
    bytes: a longer line is refused while it is read (WireViolation "oversized")."""

    def __init__(self, read_fd, write_fd, cap):
        self.read_fd, self.write_fd, self.cap = read_fd, write_fd, cap
        self._buffer = b""

    def receive(self, deadline):
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic() if deadline is not None else None
            if left is not None and (
                left <= 0 or not select.select([self.read_fd], [], [], left)[0]
            ):
                raise ChannelClosed("timeout")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise ChannelClosed("eof")
            self._buffer += chunk
            if len(self._buffer.split(b"\n", 1)[0]) > self.cap:
                raise WireViolation("oversized", f"a message above {self.cap} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            raise WireViolation("malformed", "not JSON") from None
        if type(message) is not dict:
            raise WireViolation("malformed", "not a JSON object")
        return message

    def send(self, message, deadline):
        data = (json.dumps(message) + "\n").encode("utf-8", "backslashreplace")
        while data:
            left = deadline - time.monotonic() if deadline is not None else None
            if left is not None and (
                left <= 0 or not select.select([], [self.write_fd], [], left)[1]
            ):
                raise ChannelClosed("timeout")
            try:
                data = data[os.write(self.write_fd, data) :]
            except BrokenPipeError:
                raise ChannelClosed("eof") from None


class ProgramRaised(Exception):
    """The program's code raised while computing a value (its type name and text in detail)."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind, self.detail = kind, detail  # kind: error | memory | exit


_builtin_errors = {}


def program_raised(kind, type_name, detail):
    """A ProgramRaised that is also the builtin exception the program raised (ValueError, ...),
    so test code may expect it (assertRaises, except ValueError) without running program code."""
    builtin = getattr(builtins, type_name, None) if kind == "error" else None
    # never one that steers control flow: a StopIteration from `f` would end map(f, ...) early
    # (and all() of nothing is True); an AssertionError would look like the test's own
    steering = (AssertionError, StopIteration, StopAsyncIteration)
    if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin not in steering:
        if type_name not in _builtin_errors:
            try:
                _builtin_errors[type_name] = type(type_name, (builtin, ProgramRaised), {})
            except TypeError:  # a layout the mixin cannot join
                _builtin_errors[type_name] = ProgramRaised
        cls = _builtin_errors[type_name]
        error = cls.__new__(cls, detail)
        ProgramRaised.__init__(error, kind, detail)
        return error
    return ProgramRaised(kind, detail)


class RemoteRef:
    """An object that stays in the program's process: it can be called and its attributes
    read (both computed there), never compared, hashed or tested for truth here."""

    __slots__ = ("_program", "_ref")

    def __init__(self, program, ref):
        object.__setattr__(self, "_program", program)
        object.__setattr__(self, "_ref", ref)

    def __call__(self, *args, **kwargs):
        return self._program.request({"op": "call", "ref": self._ref}, args, kwargs)

    def __getattr__(self, name):
        return self._program.request({"op": "attr", "ref": self._ref, "name": name}, (), {})

    def _refuse(self, *_):
        raise TypeError("an object of the program is not plain data: it cannot be compared")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = _refuse
    __iter__ = __len__ = __contains__ = __getitem__ = _refuse

    def __repr__(self):
        return f"<program object {self._ref}>"


class ProgramClient:
    """The grader's side: asks the program's process for names, calls and attributes, and
    gets back plain values (or RemoteRefs). Every answer is decoded strictly."""

    def __init__(self, channel, deadline):
        self.channel, self.deadline = channel, deadline

    def wait_loaded(self):
        message = self.channel.receive(self.deadline)
        event = message.get("event")
        if event == "loaded" and len(message) == 1:
            return
        if event in ("error", "memory", "exit") and isinstance(message.get("detail"), str):
            raise program_raised(event, str(message.get("type", "")), message["detail"])
        raise WireViolation("malformed", "expected the program to report it loaded")

    def name(self, name):
        return self.request({"op": "name", "name": name}, (), {})

    def request(self, head, args, kwargs):
        def refer(value):
            if isinstance(value, RemoteRef):
                return value._ref
            raise TypeError(f"{type(value).__name__} cannot be sent to the program")

        message = dict(head)
        if head["op"] == "call":
            message["args"] = [encode(a, refer) for a in args]
            message["kwargs"] = [[k, encode(v, refer)] for k, v in kwargs.items()]
        try:
            self.channel.send(message, self.deadline)
        except ChannelClosed as closed:
            if closed.what != "eof":
                raise
            # The program is gone. Whether a request lands before it exits is a race, so what
            # it wrote before it went is judged as if the request had reached it.
        reply = self.channel.receive(self.deadline)
        if set(reply) == {"value"}:
            return decode(reply["value"], lambda n: RemoteRef(self, n))
        kind, type_name, detail = reply.get("raised"), reply.get("type"), reply.get("detail")
        if (
            kind in ("error", "memory", "exit")
            and isinstance(type_name, str)
            and isinstance(detail, str)
        ):
            raise program_raised(kind, type_name, detail)
        raise WireViolation("malformed", "not an answer")


def free_names(tree):
    """The names a test's code reads but never binds itself and that are not builtins: the
    program's names it uses (bound anywhere in the test counts as the test's own)."""
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return sorted(read - bound - set(dir(builtins)) - {"__name__", "__file__"})
