"""Value-shaped assert tests, judged in the harness's own process on plain values.

A test is value-shaped when its code (parsed with `ast`, never run) is only
- `assert <expr>[, <message>]` statements,
- `import math` / `from math import ...`, and
- `NAME = <expr>` assignments,
where every expression is built from literals, the names it assigned, a closed set of pure
builtins (abs, len, sorted, set, round, isinstance, ...), `math` functions and constants, the
operators (arithmetic on numbers only), comparisons, `and`/`or`/`not`, indexing, and calls of the
program's names (`add(1, 2)`, `f(g(3), key=[1])`): names read without being bound that are no
builtin; and at least one such call. Then each call of the program is one request to the
program's process (its arguments sent as data), its return value comes back as plain data, and
this module evaluates the rest, the comparison included: no code of the test runs anywhere.
Any other shape is judged by `_judge.py` in an interpreter of its own.
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import time
from typing import Any

from rewardprof.environments.code._remote import ProgramClient
from rewardprof.environments.code._wire import ChannelClosed
from rewardprof.environments.code.names import TaskNames

_PURE = [
    "abs",
    "all",
    "any",
    "bool",
    "bytes",
    "complex",
    "dict",
    "float",
    "frozenset",
    "int",
    "isinstance",
    "len",
    "list",
    "max",
    "min",
    "round",
    "set",
    "sorted",
    "str",
    "sum",
    "tuple",
    "type",
]
SAFE_NAMES: dict[str, Any] = {name: getattr(builtins, name) for name in _PURE}
SAFE_NAMES["math"] = math  # tests often rely on the program's own `import math`
SAFE_MATH: dict[str, Any] = {
    name: getattr(math, name)
    for name in [
        "isclose",
        "fabs",
        "sqrt",
        "floor",
        "ceil",
        "isnan",
        "isinf",
        "isfinite",
        "inf",
        "nan",
        "pi",
        "e",
    ]
}
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_NODES = (
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.UnaryOp,
    ast.BinOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Subscript,
    ast.Slice,
    ast.Name,
    ast.Attribute,
    ast.keyword,
    ast.Load,
    ast.Store,
    ast.expr_context,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
)


class _NotValueShaped(Exception):
    pass


def _check_expression(node: ast.AST, program_names: set[str], own: set[str]) -> int:
    """How many calls of the program `node` makes; _NotValueShaped if it is not pure data."""
    calls = 0
    for sub in ast.walk(node):
        if not isinstance(sub, _NODES):
            raise _NotValueShaped(type(sub).__name__)
        if isinstance(sub, ast.Attribute) and not (
            isinstance(sub.value, ast.Name) and sub.value.id == "math" and sub.attr in SAFE_MATH
        ):
            raise _NotValueShaped("attribute")
        if isinstance(sub, ast.keyword) and sub.arg is None:
            raise _NotValueShaped("**kwargs")
        if isinstance(sub, ast.Name) and sub.id in program_names:
            calls += 1  # counted at each use; a use other than a call is refused below
        if isinstance(sub, ast.Name) and sub.id not in program_names | own | set(SAFE_NAMES):
            raise _NotValueShaped(f"name {sub.id}")
    direct = sum(
        isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id in program_names
        for s in ast.walk(node)
    )
    if direct != calls:
        raise _NotValueShaped("a program name used other than called")
    return calls


def value_plan(test: str, names: TaskNames) -> list[ast.stmt] | None:
    """The test's statements if it is value-shaped, else None (judged by _judge.py)."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if names.given:
        return None  # the prompt's helpers run in the judge
    program_names = set(names.program) | set(names.maybe)
    own: set[str] = set()
    calls = 0
    try:
        for stmt in tree.body:
            if isinstance(stmt, ast.Import) and [a.name for a in stmt.names] == ["math"]:
                own.add(stmt.names[0].asname or "math")
            elif isinstance(stmt, ast.ImportFrom) and stmt.module == "math" and stmt.level == 0:
                if any(a.name not in SAFE_MATH or a.asname for a in stmt.names):
                    return None
                own.update(a.name for a in stmt.names)
            elif isinstance(stmt, ast.Assert):
                calls += _check_expression(stmt.test, program_names, own)
            elif (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                calls += _check_expression(stmt.value, program_names, own)
                own.add(stmt.targets[0].id)
            else:
                return None
    except _NotValueShaped:
        return None
    return tree.body if calls else None


_POW_BITS = 1 << 20  # an int power of at most a million bits: `2 ** 1001` is fine


def _power(left: Any, right: Any) -> Any:
    big = isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
    if big and abs(left).bit_length() * right > _POW_BITS:
        raise ValueError("power too large")
    return operator.pow(left, right)


class _Evaluator:
    def __init__(self, program: ProgramClient, names: TaskNames):
        self.program = program
        self.names: dict[str, Any] = dict(SAFE_NAMES)
        self.program_names, self.maybe = set(names.program), set(names.maybe)
        self.remote: dict[str, Any] = {}

    def run(self, body: list[ast.stmt]) -> None:
        """Raises AssertionError for a failed assert; ProgramRaised and wire errors pass up."""
        for stmt in body:
            if isinstance(stmt, ast.Import):
                self.names[stmt.names[0].asname or "math"] = math
            elif isinstance(stmt, ast.ImportFrom):
                self.names.update({a.name: SAFE_MATH[a.name] for a in stmt.names})
            elif isinstance(stmt, ast.Assign):
                self.names[stmt.targets[0].id] = self.eval(stmt.value)  # type: ignore[attr-defined]
            elif isinstance(stmt, ast.Assert) and not self.eval(stmt.test):
                raise AssertionError(ast.unparse(stmt.test)[:200])

    def eval(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self.eval(e) for e in node.elts]
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Dict):
            return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values, strict=True)}
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](self.eval(node.operand))
        if isinstance(node, ast.BinOp):
            left, right = self.eval(node.left), self.eval(node.right)
            numbers = (int, float, complex)
            if not (isinstance(left, numbers) and isinstance(right, numbers)):
                raise TypeError("arithmetic on values that are not numbers")
            if isinstance(node.op, ast.Pow):
                return _power(left, right)
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            value: Any = None
            for operand in node.values:
                value = self.eval(operand)
                if bool(value) != is_and:
                    return value
            return value
        if isinstance(node, ast.Compare):
            left = self.eval(node.left)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = self.eval(comparator)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return self.eval(node.body) if self.eval(node.test) else self.eval(node.orelse)
        if isinstance(node, ast.Subscript):
            return self.eval(node.value)[self.eval(node.slice)]
        if isinstance(node, ast.Slice):
            parts = (node.lower, node.upper, node.step)
            return slice(*(None if p is None else self.eval(p) for p in parts))
        if isinstance(node, ast.Attribute):
            return SAFE_MATH[node.attr]
        if isinstance(node, ast.Name):
            return self.names[node.id]
        if isinstance(node, ast.Call):
            return self.call(node)
        raise TypeError(f"not a value-shaped node: {type(node).__name__}")

    def _program_function(self, name: str) -> Any:
        """The program's `name`, or None where the builtin stands (a `maybe` name the
        program does not bind)."""
        if name not in self.remote:
            mine = name in self.program_names or self.program.defines(name)
            self.remote[name] = self.program.name(name) if mine else None
        return self.remote[name]

    def call(self, node: ast.Call) -> Any:
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords if k.arg is not None}
        if isinstance(node.func, ast.Name) and node.func.id in self.program_names | self.maybe:
            function = self._program_function(node.func.id)  # computed there, on data
            if function is not None:
                return function(*args, **kwargs)
        function = self.eval(node.func)
        if function in (set, frozenset, dict) and len(args) == 1 and not kwargs:
            return self._bounded(function, args[0])
        return function(*args, **kwargs)

    def _bounded(self, kind: Any, items: Any) -> Any:
        """set/frozenset/dict of data one member at a time, within the test's deadline, so
        values with colliding hashes cannot hold the harness past it."""
        deadline = self.program.deadline
        if kind is dict and isinstance(items, dict):
            items = list(items.items())
        out: Any = {} if kind is dict else set()
        for n, item in enumerate(items):
            if n % 64 == 0 and deadline is not None and time.monotonic() > deadline:
                raise ChannelClosed("timeout")
            if kind is dict:
                key, value = item
                out[key] = value
            else:
                out.add(item)
        return frozenset(out) if kind is frozenset else out


def judge_values(body: list[ast.stmt], program: ProgramClient, names: TaskNames) -> int:
    """Run a value-shaped test here; AssertionError if it fails. Returns how many calls of
    the program it made."""
    _Evaluator(program, names).run(body)
    return program.calls
