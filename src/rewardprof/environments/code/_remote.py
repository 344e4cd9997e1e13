"""The grader's side of the wire: what the program's values and objects become here.

Stdlib only: the harness imports it; its text, after _wire.py's and _values.py's,
also starts the judge script (_judge.py). What the program sends back is data
(_values.py) or a handle:
- a function or other object: a RemoteRef, whose calls, attributes, `str`, `repr`, `len`,
  iteration and indexing are computed in the program's process (and come back as data or
  handles again); it cannot be compared, hashed, tested for truth or searched (`in`): a
  program object is no answer;
- a class of the program: a proxy class (one per class), so `isinstance(x, Cls)` and
  `except ProgramError` work; calling it constructs in the program's process;
- an iterator or generator: a RemoteIterator, whose items are asked for in batches (at most
  a million items per test: `list()` of an endless generator is an `output_limit`);
- an exception the program raised: an instance of the proxy of its class, which derives from
  the builtin exception it derives from (never one that steers control flow: AssertionError,
  StopIteration), and from ProgramRaised, so the judge tells it from the test's own.
"""

import builtins
import collections
import sys

if __name__ != "__main__":  # imported by the harness; in the judge script the wire comes first
    from rewardprof.environments.code._values import Decoder, encode
    from rewardprof.environments.code._wire import ChannelClosed, WireViolation

_STEERING = (AssertionError, StopIteration, StopAsyncIteration)
_MAX_CLASSES = 256
_MAX_ITEMS = 1_000_000  # items of the program's iterators per test, all together


class Unjudgeable(TypeError):
    """The test needs what cannot be judged outside the program: a program object's own
    comparison, hash or truth, or a test's object sent to the program. A TypeError, as
    Python would raise for a value it cannot use; the verdict says `unjudgeable`."""


class ProgramRaised(Exception):
    """The program's code raised while computing a value (its type name and text in detail)."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind, self.detail = kind, detail  # kind: error | memory | exit


def _builtin_error(type_name):
    builtin = getattr(builtins, str(type_name), None)
    if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin not in _STEERING:
        return builtin
    return None


_builtin_errors = {}


def program_raised(kind, type_name, detail, cls=None):
    """A ProgramRaised that is also the exception the program raised: the proxy `cls` of its
    class, else the builtin of that name (ValueError, ...), so test code may expect it
    (assertRaises, except) without running program code."""
    if cls is None and kind == "error" and (builtin := _builtin_error(type_name)) is not None:
        if type_name not in _builtin_errors:
            try:
                _builtin_errors[type_name] = type(type_name, (builtin, ProgramRaised), {})
            except TypeError:  # a layout the mixin cannot join
                _builtin_errors[type_name] = ProgramRaised
        cls = _builtin_errors[type_name]
    if cls is None:
        return ProgramRaised(kind, detail)
    error = cls.__new__(cls, detail)
    ProgramRaised.__init__(error, kind, detail)
    return error


class RemoteRef:
    """An object that stays in the program's process (see the module's docstring)."""

    __slots__ = ("_program", "_ref")

    def __init__(self, program, ref):
        object.__setattr__(self, "_program", program)
        object.__setattr__(self, "_ref", ref)

    def __call__(self, *args, **kwargs):
        return self._program.request({"op": "call", "ref": self._ref}, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # the interpreter's own probes are not the test's
        return self._program.request({"op": "attr", "ref": self._ref, "name": name}, (), {})

    def _special(self, name, *args):
        return self._program.request({"op": "special", "ref": self._ref, "name": name}, args, {})

    def __str__(self):
        return self._special("str")

    def __repr__(self):
        try:
            return str(self._special("repr"))
        except (ProgramRaised, ChannelClosed, WireViolation):
            return f"<program object {self._ref}>"

    def __len__(self):
        return self._special("len")

    def __iter__(self):
        return self._special("iter")

    def __getitem__(self, key):
        return self._special("getitem", key)

    def _refuse(self, *_):
        raise Unjudgeable(
            "an object of the program is not plain data: it cannot be compared, hashed, "
            "searched or tested for truth outside the program"
        )

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = _refuse
    __contains__ = _refuse


class RemoteIterator:
    """An iterator of the program's: items come in batches (1, 2, 4, ... up to 256)."""

    __slots__ = ("_program", "_ref", "_items", "_done", "_batch")

    def __init__(self, program, ref):
        self._program, self._ref = program, ref
        self._items, self._done, self._batch = collections.deque(), False, 1

    def __iter__(self):
        return self

    def __next__(self):
        if not self._items and not self._done:
            head = {"op": "next", "ref": self._ref, "count": self._batch}
            items = self._program.request(head, (), {})
            if type(items) is not list or len(items) > self._batch:
                raise WireViolation("malformed", "not a batch of items")
            self._done = len(items) < self._batch
            self._program.items += len(items)
            if self._program.items > _MAX_ITEMS:  # an endless generator: bounded here
                raise WireViolation("oversized", f"more than {_MAX_ITEMS} items of iterators")
            self._items.extend(items)
            self._batch = min(self._batch * 2, 256)
        if not self._items:
            raise StopIteration
        return self._items.popleft()


class ProgramClass(type):
    """The metaclass of the proxies of the program's classes (exceptions aside)."""

    def __call__(cls, *args, **kwargs):
        return cls._remote_program.request({"op": "call", "ref": cls._remote_ref}, args, kwargs)

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        head = {"op": "attr", "ref": cls._remote_ref, "name": name}
        return cls._remote_program.request(head, (), {})

    def __repr__(cls):
        return f"<program class {cls.__name__}>"


def _exception_init(self, *args):
    BaseException.__init__(self, *args)
    self.kind, self.detail = "error", " ".join(map(str, args))


def _class_info(info):
    if not (
        type(info) is list
        and len(info) == 4
        and type(info[0]) is int
        and type(info[1]) is str
        and type(info[2]) is list
        and (info[3] is None or type(info[3]) is str)
    ):
        raise WireViolation("malformed", "not a class")
    name = info[1].rsplit(".", 1)[-1][:100]
    return info[0], (name if name.isidentifier() else "ProgramClass"), info[2][:8], info[3]


class ProgramClient:
    """The grader's side: asks the program's process for names, calls and attributes, and
    gets back values, handles and proxies. Every answer is decoded strictly, its sets and
    dicts filled before `deadline`. `calls` counts the calls made of the program."""

    def __init__(self, channel, deadline):
        self.channel, self.deadline = channel, deadline
        self.calls = self.items = 0
        self.classes = {}

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

    def defines(self, name):
        """Whether the program's module binds `name` itself."""
        return self.request({"op": "defines", "name": name}, (), {}) is True

    def _refer(self, value):
        if isinstance(value, (RemoteRef, RemoteIterator)):
            return {"ref": value._ref}
        if isinstance(value, type) and type(vars(value).get("_remote_ref")) is int:
            return {"ref": vars(value)["_remote_ref"]}
        raise Unjudgeable(f"{type(value).__name__} is no data: it cannot be sent to the program")

    def request(self, head, args, kwargs):
        message = dict(head)
        if head["op"] == "call":
            self.calls += 1
        if args or kwargs or head["op"] == "call":
            message["args"] = [encode(a, self._refer) for a in args]
            message["kwargs"] = [[k, encode(v, self._refer)] for k, v in kwargs.items()]
        try:
            self.channel.send(message, self.deadline)
        except ChannelClosed as closed:
            if closed.what != "eof":
                raise
            # The program is gone. Whether a request lands before it exits is a race, so what
            # it wrote before it went is judged as if the request had reached it.
        reply = self.channel.receive(self.deadline)
        if set(reply) == {"value"}:
            return Decoder(self._handle, self.deadline).decode(reply["value"])
        kind, type_name, detail = reply.get("raised"), reply.get("type"), reply.get("detail")
        if (
            kind in ("error", "memory", "exit")
            and isinstance(type_name, str)
            and isinstance(detail, str)
            and set(reply) <= {"raised", "type", "detail", "class"}
        ):
            cls = self._class(reply["class"]) if "class" in reply else None
            raise program_raised(kind, type_name, detail, cls if kind == "error" else None)
        raise WireViolation("malformed", "not an answer")

    def _handle(self, tag, inner):
        if tag in ("ref", "iter") and type(inner) is int:
            return (RemoteRef if tag == "ref" else RemoteIterator)(self, inner)
        if tag == "class":
            return self._class(inner)
        if tag == "object" and type(inner) is list and len(inner) == 2 and type(inner[0]) is int:
            cls = self._class(inner[1])
            if issubclass(cls, ProgramRaised):
                return program_raised("error", cls.__name__, "", cls)
            obj = object.__new__(cls)
            RemoteRef.__init__(obj, self, inner[0])
            return obj
        return None

    def _class(self, info, depth=0):
        ref, name, bases, exc = _class_info(info)
        if ref in self.classes:
            return self.classes[ref]
        if depth > 16 or len(self.classes) >= _MAX_CLASSES:
            raise WireViolation("malformed", "too many or too deep classes")
        parents = tuple(self._class(b, depth + 1) for b in bases)
        ns = {"_remote_ref": ref, "_remote_program": self, "__module__": "solution"}
        if exc is not None:
            ns["__init__"] = _exception_init
            chain = [p for p in parents if issubclass(p, ProgramRaised)]
            fallback = (_builtin_error(exc) or Exception, ProgramRaised)
            attempts = [tuple(chain), fallback, (ProgramRaised,)] if chain else [fallback]
            make = type
        else:
            ns["__slots__"] = ()
            chain = [p for p in parents if isinstance(p, ProgramClass)]
            attempts = [tuple(chain), (RemoteRef,)] if chain else [(RemoteRef,)]
            make = ProgramClass
        for bases_here in [*attempts, (ProgramRaised,) if exc is not None else (RemoteRef,)]:
            try:
                cls = make(name, bases_here, dict(ns))
                break
            except TypeError:  # a layout or order the proxies cannot join: fewer bases
                continue
        self.classes[ref] = cls
        return cls


class SolutionModule(type(sys)):
    """`solution` in the judge: `from solution import add` and `solution.add` ask the
    program for the name."""

    def __init__(self, program):
        super().__init__("solution")
        self._remote_program = program

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        try:
            return self._remote_program.name(name)
        except ProgramRaised as exc:
            raise ImportError(f"cannot import name {name!r} from the program") from exc
