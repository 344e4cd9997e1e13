"""Values on the wire (_wire.py) between a program and its grader, as plain JSON.

Stdlib only: the harness imports it; its text follows _wire.py's in the scripts that
speak the wire in other processes (the runner in the sandbox, the judge).

A value crosses as JSON: null, true/false, ints, floats (NaN and infinities as JSON's
extensions), strings and lists as themselves; anything else as a one-key object:
- plain containers and numbers: {"tuple": [...]}, {"set"/"frozenset": [...]},
  {"dict": [[key, value], ...]}, {"bytes": "<hex>"}, {"bytearray"}, {"complex": [re, im]},
  {"int": "<hex>"} (an int of more than 4096 bits: no decimal conversion, so no 4,300-digit
  limit), {"range": [start, stop, step]};
- the standard library's data types, rebuilt as themselves on the other side: "counter",
  "ordereddict", "defaultdict" (its factory when it is a builtin type, else a handle),
  "deque", "namedtuple" (type name, fields, values), "date", "datetime", "time",
  "timedelta", "decimal", "fraction", dict views ("keys", "values", "items"), "enum"
  (module, name, members, the member's value, its base) and "dataclass" (module, name,
  fields, values): a namedtuple, enum or dataclass of the program is rebuilt from its fields
  as data (one class per shape), never as the program's class with its behaviour;
- anything else is the sending side's (`refer`): a handle ({"ref": n}, and on the program's
  side {"object": ...}, {"class": ...}, {"iter": n}; _remote.py turns them into proxies).
A subclass of a plain type (an int with its own __eq__) is reduced to its base type.

The receiving side decodes strictly (any other shape is a violation) and bounds decoding in
time as the wire bounds it in bytes: sets and dicts are
filled one member at a time, checking the deadline, so colliding hashes cannot make it run on
after the deadline.
"""

import builtins
import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import json
import sys
import time

if __name__ != "__main__":  # imported by the harness; in a script the wire's text comes first
    from rewardprof.environments.code._wire import ChannelClosed, WireViolation

_MAX_DEPTH = 100
_BIG_INT_BITS = 4096
_FRACTION_BITS = 1 << 16  # reducing a fraction is quadratic in its parts' size
_MAX_FIELDS, _MAX_MEMBERS = 256, 1024
# an enum's base, most specific first: a rebuilt one compares as the program's does
_ENUM_KINDS = {
    "intflag": enum.IntFlag,
    "flag": enum.Flag,
    "int": enum.IntEnum,
    "str": enum.StrEnum,
}
_VIEWS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items"}
_FACTORIES = ("int", "float", "str", "list", "dict", "set", "tuple", "frozenset", "bytes")
_CONTAINERS = {"tuple": tuple, "frozenset": frozenset}
_rebuilt = {}  # classes rebuilt from a shape (namedtuple, enum, dataclass), one per shape


def _encode_int(value):
    value = int(value)
    return value if value.bit_length() <= _BIG_INT_BITS else {"int": hex(value)}


def _encode_library(value, enc):
    """The standard library's data types (checked before their plain bases); None if not one."""
    if isinstance(value, enum.Enum):
        cls = type(value)
        members = [[m.name, enc(m.value)] for m in cls]
        kind = next((k for k, base in _ENUM_KINDS.items() if issubclass(cls, base)), "enum")
        return {"enum": [cls.__module__, cls.__qualname__, members, enc(value.value), kind]}
    if isinstance(value, tuple) and isinstance(getattr(type(value), "_fields", None), tuple):
        fields = [str(f) for f in type(value)._fields]
        return {"namedtuple": [type(value).__name__, fields, [enc(v) for v in value]]}
    if isinstance(value, collections.defaultdict):
        factory = value.default_factory
        named = factory.__name__ if factory in [getattr(builtins, n) for n in _FACTORIES] else None
        made = named if factory is None or named else enc(factory)
        return {"defaultdict": [made, [[enc(k), enc(v)] for k, v in dict.items(value)]]}
    for kind, name in ((collections.Counter, "counter"), (collections.OrderedDict, "ordereddict")):
        if isinstance(value, kind):
            return {name: [[enc(k), enc(v)] for k, v in dict.items(value)]}
    if isinstance(value, collections.deque):
        return {"deque": [value.maxlen, [enc(v) for v in value]]}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    for kind in (datetime.date, datetime.time):
        if isinstance(value, kind):
            return {kind.__name__: value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {"timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, fractions.Fraction):
        return {"fraction": [_encode_int(value.numerator), _encode_int(value.denominator)]}
    if type(value) in _VIEWS:
        if _VIEWS[type(value)] == "items":
            return {"items": [[enc(k), enc(v)] for k, v in value]}
        return {_VIEWS[type(value)]: [enc(v) for v in value]}
    if type(value) is range:
        return {
            "range": [_encode_int(value.start), _encode_int(value.stop), _encode_int(value.step)]
        }
    if not isinstance(value, type) and any(
        "__dataclass_fields__" in vars(k) for k in type(value).__mro__
    ):
        cls = type(value)
        fields = [[f.name, enc(getattr(value, f.name))] for f in dataclasses.fields(value)]
        frozen = bool(
            getattr(cls, "__dataclass_params__", None) and cls.__dataclass_params__.frozen
        )
        return {"dataclass": [cls.__module__, cls.__qualname__, fields, frozen]}
    return None


def encode(value, refer, depth=0):
    """`value` as wire JSON; `refer(obj) -> dict` stands for what is not data."""
    if depth > _MAX_DEPTH:
        raise ValueError("value nested too deep")

    def enc(v):
        return encode(v, refer, depth + 1)

    if value is None or type(value) in (bool, float, str):
        return value
    if type(value) is int:
        return _encode_int(value)
    if type(value) is list:
        return [enc(v) for v in value]
    if (library := _encode_library(value, enc)) is not None:
        return library
    if isinstance(value, bool):
        return bool(int(value))
    if isinstance(value, int):
        return _encode_int(value)
    for base in (float, str):
        if isinstance(value, base):
            return base(value)
    for base in (bytes, bytearray):
        if isinstance(value, base):
            return {base.__name__: bytes(value).hex()}
    if isinstance(value, complex):
        return {"complex": [complex(value).real, complex(value).imag]}
    if isinstance(value, list):
        return [enc(v) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"tuple": [enc(v) for v in tuple.__iter__(value)]}
    for kind in (frozenset, set):
        if isinstance(value, kind):
            return {kind.__name__: [enc(v) for v in kind.__iter__(value)]}
    if isinstance(value, dict):
        return {"dict": [[enc(k), enc(v)] for k, v in dict.items(value)]}
    return refer(value)


def _rebuilt_class(key, make):
    if key not in _rebuilt:
        if len(_rebuilt) >= 512:  # a long-lived worker keeps at most this many shapes
            _rebuilt.clear()
        _rebuilt[key] = make()
    return _rebuilt[key]


class Decoder:
    """Wire JSON -> values, strictly; `handles(tag, inner)` gives what a handle stands for
    (or None: not a handle this side accepts); `deadline` bounds the time spent filling
    sets and dicts (ChannelClosed("timeout") past it); `local_module(name)` is a module whose
    classes may stand for themselves (the runner: the program's own)."""

    def __init__(self, handles, deadline=None, local_module=None):
        self.handles, self.deadline, self.local_module = handles, deadline, local_module
        self._steps = 0
        self._shapes = 0

    def _shape(self, key, make):
        """A class rebuilt from a shape: at most 64 new ones per message."""
        if key not in _rebuilt:
            self._shapes += 1
            if self._shapes > 64:
                raise WireViolation("malformed", "more than 64 new record shapes in one message")
        return _rebuilt_class(key, make)

    def _tick(self):
        self._steps += 1
        if self.deadline is not None and self._steps % 64 == 0 and time.monotonic() > self.deadline:
            raise ChannelClosed("timeout")

    def decode(self, data, depth=0):
        if depth > _MAX_DEPTH:
            raise WireViolation("malformed", "value nested too deep")
        if data is None or type(data) in (bool, int, float, str):
            return data
        if type(data) is list:
            return [self.decode(v, depth + 1) for v in data]
        if type(data) is not dict or len(data) != 1:
            raise WireViolation("malformed", "not a wire value")
        ((tag, inner),) = data.items()
        handle = self.handles(tag, inner)
        if handle is not None:
            return handle
        try:
            return self._tagged(tag, inner, depth)
        except WireViolation:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, ArithmeticError, AttributeError):
            raise WireViolation(
                "malformed", f"a {tag!r} value that cannot be rebuilt"[:100]
            ) from None

    def _items(self, inner, depth):
        if type(inner) is not list:
            raise ValueError("not a list")
        return [self.decode(v, depth + 1) for v in inner]

    def _pairs(self, inner, depth, into):
        if type(inner) is not list:
            raise ValueError("not a list")
        for pair in inner:
            if type(pair) is not list or len(pair) != 2:
                raise WireViolation("malformed", "dict item is not a pair")
            self._tick()
            into[self.decode(pair[0], depth + 1)] = self.decode(pair[1], depth + 1)
        return into

    def _set(self, inner, depth):
        out = set()
        for item in self._items(inner, depth):
            self._tick()
            out.add(item)
        return out

    def _tagged(self, tag, inner, depth):
        if tag in ("bytes", "bytearray") and type(inner) is str:
            return {"bytes": bytes, "bytearray": bytearray}[tag](bytes.fromhex(inner))
        if tag == "int" and type(inner) is str:
            return int(inner, 16)
        complex_parts = tag == "complex" and type(inner) is list and len(inner) == 2
        if complex_parts and all(type(p) in (int, float) for p in inner):
            return complex(*inner)
        if tag in _CONTAINERS:
            items = self._items(inner, depth) if tag == "tuple" else self._set(inner, depth)
            return _CONTAINERS[tag](items)
        if tag == "set":
            return self._set(inner, depth)
        if tag in ("dict", "counter", "ordereddict"):
            kind = {"dict": dict, "counter": collections.Counter}.get(tag, collections.OrderedDict)
            return self._pairs(inner, depth, kind())
        return self._library(tag, inner, depth)

    def _library(self, tag, inner, depth):
        if tag == "defaultdict" and type(inner) is list and len(inner) == 2:
            factory = inner[0]
            made = getattr(builtins, factory) if factory in _FACTORIES else None
            if factory is not None and made is None:
                made = self.decode(factory, depth + 1)
            return self._pairs(inner[1], depth, collections.defaultdict(made))
        if tag == "deque" and type(inner) is list and len(inner) == 2:
            maxlen = inner[0] if type(inner[0]) is int else None
            return collections.deque(self._items(inner[1], depth), maxlen)
        if tag in ("date", "datetime", "time") and type(inner) is str:
            return getattr(datetime, tag).fromisoformat(inner[:64])
        if tag == "timedelta" and type(inner) is list and all(type(p) is int for p in inner):
            return datetime.timedelta(*inner)
        if tag == "decimal" and type(inner) is str and len(inner) < 10_000:
            return decimal.Decimal(inner)
        if tag == "fraction" and type(inner) is list and len(inner) == 2:
            parts = [self.decode(p, depth + 1) for p in inner]
            if any(type(p) is not int or p.bit_length() > _FRACTION_BITS for p in parts):
                raise WireViolation("malformed", "a fraction of parts too large to reduce")
            return fractions.Fraction(*parts)
        if tag in ("keys", "values", "items"):
            return self._view(tag, self._items(inner, depth))
        if tag == "range" and type(inner) is list and len(inner) == 3:
            return range(*[self.decode(p, depth + 1) for p in inner])
        if tag in ("namedtuple", "enum", "dataclass") and type(inner) is list and len(inner) > 2:
            self._check_shape(tag, inner)
        if tag == "namedtuple" and type(inner) is list and len(inner) == 3:
            name, fields, values = inner[0], inner[1], self._items(inner[2], depth)
            key = ("namedtuple", str(name), tuple(map(str, fields)))
            cls = self._shape(key, lambda: collections.namedtuple(str(name), fields))
            return cls(*values)
        if tag == "enum" and type(inner) is list and len(inner) == 5:
            return self._enum(*inner, depth=depth)
        if tag == "dataclass" and type(inner) is list and len(inner) == 4:
            return self._dataclass(*inner, depth=depth)
        raise WireViolation("malformed", f"unknown wire value {tag!r}"[:100])

    def _check_shape(self, tag, inner):
        """A record's fields or members, bounded: building a class of thousands of them
        (an enum's members are checked pairwise) would hold the decoder far past a deadline."""
        fields = inner[1] if tag == "namedtuple" else inner[2]
        most = _MAX_MEMBERS if tag == "enum" else _MAX_FIELDS
        if type(fields) is not list or len(fields) > most:
            raise WireViolation("malformed", f"a {tag} of more than {most} fields or members")

    def _view(self, tag, items):
        if tag == "keys":
            keys = {}
            for key in items:
                self._tick()
                keys[key] = None
            return keys.keys()
        if tag == "values":
            return dict(enumerate(items)).values()
        out = {}
        for pair in items:
            if type(pair) is not list or len(pair) != 2:
                raise WireViolation("malformed", "an item is not a pair")
            self._tick()
            out[pair[0]] = pair[1]
        return out.items()

    def _local(self, module, qualname):
        """The class itself where this side may use it (a standard library module, or the
        runner's program module), else None."""
        if module != self.local_module and module not in sys.stdlib_module_names:
            return None
        found = sys.modules.get(module)
        for part in str(qualname).split("."):
            found = getattr(found, part, None)
        return found if isinstance(found, type) else None

    def _enum(self, module, qualname, members, value, kind, depth):
        """The member of that value (a Flag's combination too) of the enum itself where this
        side has it, else of one rebuilt with the same base (IntEnum, StrEnum, Flag, ...), so
        it compares with ints and strings as the program's does."""
        value = self.decode(value, depth + 1)
        local = self._local(module, qualname)
        if local is not None and issubclass(local, enum.Enum):
            return local(value)
        values = [(str(n), self.decode(v, depth + 1)) for n, v in members]
        key = ("enum", str(module), str(qualname), str(kind), json.dumps(members, sort_keys=True))
        name = str(qualname).rsplit(".", 1)[-1]
        base = _ENUM_KINDS.get(kind, enum.Enum)
        made = self._shape(
            key, lambda: base(name, values, module=str(module), qualname=str(qualname))
        )
        return made(value)

    def _dataclass(self, module, qualname, fields, frozen, depth):
        values = {str(n): self.decode(v, depth + 1) for n, v in fields}
        local = self._local(module, qualname)
        if local is not None and dataclasses.is_dataclass(local):
            return local(**values)
        key = ("dataclass", str(module), str(qualname), tuple(values), bool(frozen))
        name = str(qualname).rsplit(".", 1)[-1]

        def make():
            made = dataclasses.make_dataclass(name, list(values), frozen=bool(frozen))
            # its origin, so that sent back to the program it is the program's class again
            made.__module__, made.__qualname__ = str(module), str(qualname)
            return made

        cls = self._shape(key, make)
        return cls(**values)


def decode(data, handles, deadline=None):
    """Wire JSON -> a value (strict); see Decoder."""
    return Decoder(handles, deadline).decode(data)
