"""Which names of an assert test are the program's: the judge takes nothing else from it.

A test reads names it does not bind itself. Each is, in this order:
- asked of the program: the row's `entry_point`, a function of the prompt with no body but
  its docstring (a stub: `def f(x):\n    \"\"\"...\"\"\"`), a `def NAME(` line of a prompt
  that is not Python, a name the test imports from `solution`; these even when a builtin
  has the name (a task's `def sum(a, b)` is judged as the program's);
- given by the task: bound by the prompt's Python (its imports, helper functions with a
  body such as HumanEval/38's `encode_cyclic`, constants): run by the judge from the prompt's
  text, never taken from the program;
- a builtin: the builtin;
- a standard library module (`math`, `re`): imported by the judge;
- a well-known standard library name (`Counter`, `gcd`, `reduce`, `List`): imported by the
  judge from its module;
- any other name: the program's (`add`, `Solution`, `ProgramError`).
When that leaves the test no name of the program at all (MBPP-126's `assert sum(10, 15) ==
6`), the builtins and well-known names it calls (only those the prompt mentions, if it
mentions any) are the program's when the program binds them (else the builtin, as Python
would).

`check_test` refuses (RowError, at materialize) a test that never reads a name of the program
in code that runs, and one that defines `unittest.TestCase` classes without running them.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from rewardprof.environments.base import RowError, extract_messages
from rewardprof.environments.extract import last_user_text

_EXPORTS_BY_MODULE = {
    "collections": "Counter defaultdict OrderedDict deque namedtuple ChainMap",
    "itertools": "permutations combinations combinations_with_replacement product accumulate "
    "chain groupby islice count cycle repeat starmap zip_longest takewhile dropwhile compress "
    "tee pairwise",
    "functools": "reduce lru_cache cache partial cmp_to_key total_ordering",
    "math": "gcd lcm sqrt floor ceil factorial comb perm isqrt log log2 log10 exp pi e inf "
    "nan isclose fabs prod hypot sin cos tan atan2 radians degrees fsum trunc isnan isinf",
    "heapq": "heappush heappop heapify heapreplace heappushpop nlargest nsmallest",
    "bisect": "bisect bisect_left bisect_right insort insort_left insort_right",
    "typing": "List Dict Tuple Set Optional Any Union Callable Iterable Iterator Sequence "
    "Mapping FrozenSet Deque DefaultDict Generator",
    "fractions": "Fraction",
    "decimal": "Decimal",
    "datetime": "date timedelta",
    "string": "ascii_lowercase ascii_uppercase ascii_letters digits punctuation",
    "operator": "itemgetter attrgetter",
    "copy": "deepcopy",
}
EXPORTS = {n: m for m, names in _EXPORTS_BY_MODULE.items() for n in names.split()}
_BUILTINS = frozenset(dir(builtins)) - {"__name__", "__file__"}
_DEF_LINE = re.compile(r"^[ \t]*def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.M)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[^\n]*\n(.*?)```", re.S)
_RUNNERS = {"main", "run", "TextTestRunner"}


@dataclass
class TaskNames:
    """What the judge puts in the test's namespace, and where each name comes from."""

    program: list[str] = field(default_factory=list)  # asked of the program
    maybe: list[str] = field(default_factory=list)  # the program's if it binds them
    modules: list[str] = field(default_factory=list)  # imported by the judge
    exports: dict[str, str] = field(default_factory=dict)  # name -> module, by the judge
    given: str = ""  # the prompt's Python the judge runs first
    given_names: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def prompt_text(row: dict[str, Any]) -> str:
    if isinstance(row.get("question"), str):
        return row["question"]
    try:
        return last_user_text(extract_messages(row))
    except (RowError, KeyError, TypeError):
        return ""


def _stub(node: ast.AST) -> bool:
    """A function whose body is only a docstring, `pass` or `...`, or a class of only such
    functions (LeetCode's `class Solution`): what the task asks for."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return all(
        isinstance(s, ast.Pass)
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        or (isinstance(node, ast.ClassDef) and _stub(s) and not isinstance(s, ast.ClassDef))
        for s in node.body
    )


def _binds(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _prompt_parts(prompt: str, entry_point: str | None) -> tuple[set[str], str, set[str]]:
    """(asked names, the given source, the names it binds) from the prompt."""
    asked: set[str] = set()
    given: list[str] = []
    bound: set[str] = set()
    for block in [prompt, *_FENCE.findall(prompt)]:
        try:
            tree = ast.parse(block)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in tree.body:
            names = _binds(node)
            if _stub(node) or (entry_point is not None and entry_point in names):
                asked |= names
            elif not isinstance(node, ast.Expr):
                given.append(ast.unparse(node))
                bound |= names
        return asked, "\n\n".join(given), bound - asked  # the first block that parses
    return set(_DEF_LINE.findall(prompt)), "", set()


def _reads_and_binds(tree: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(names read, names bound, names called) anywhere in `tree`."""
    read, bound, called = set(), set(), set()
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
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
    return read, bound, called


def _from_solution(tree: ast.AST) -> set[str]:
    """The names the test binds to the program's module or to names imported from it."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "solution":
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name == "solution"}
    return names


def task_names(row: dict[str, Any], test: str) -> TaskNames:
    """Where each name the test reads comes from (see the module's docstring)."""
    tree = ast.parse(test)
    entry = row.get("entry_point") if isinstance(row.get("entry_point"), str) else None
    prompt = prompt_text(row)
    asked, given, given_names = _prompt_parts(prompt, entry)
    asked |= {entry} if entry else set()
    read, bound, called = _reads_and_binds(tree)
    given_read: set[str] = set()
    if given:  # what the prompt's helpers read without binding it (a stub they call)
        given_reads, given_bound, _ = _reads_and_binds(ast.parse(given))
        given_read = given_reads - given_bound
    out = TaskNames(given=given, given_names=sorted(given_names))
    program, builtin, exported = set(), set(), set()
    for name in sorted((read | given_read) - bound - given_names):
        if name in asked:
            program.add(name)
        elif name in _BUILTINS:
            builtin.add(name)
        elif name in sys.stdlib_module_names:
            out.modules.append(name)
        elif name in EXPORTS:
            exported.add(name)
        else:
            program.add(name)
    if not (program or _from_solution(tree)):
        # the prompt's code with a body is what the task asks to write or fix when the test
        # calls nothing else ("fix this function: def f(x): ...")
        program = read & given_names
        out.given_names = sorted(given_names - program)
    if program or _from_solution(tree):
        out.exports = {n: EXPORTS[n] for n in sorted(exported)}
    else:  # no name of the program: the names it calls are the task's functions, those
        # the prompt mentions if it mentions any (`count` of "count(s) returns ...", not the
        # `Counter` of its expected value)
        candidates = (exported | builtin) & called
        mentioned = {n for n in candidates if re.search(rf"\b{re.escape(n)}\b", prompt)}
        chosen = mentioned or candidates
        program = exported & chosen
        out.maybe = sorted(builtin & chosen)
        out.exports = {n: EXPORTS[n] for n in sorted(exported - chosen)}
    out.program = sorted(program | (asked & (read | given_read)))
    return out


def _executed_reads(tree: ast.Module, functions: dict[str, ast.AST], runs_tests: bool) -> set[str]:
    """Names read by code that runs: module-level statements, class bodies, the functions
    they reach by name and, when a unittest runner is called, every TestCase method."""
    pending: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods = [
                s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
            pending += [s for s in node.body if s not in methods]
            pending += methods if runs_tests and _is_test_case(node) else []
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending.append(node)
    reads: set[str] = set()
    seen: set[str] = set()
    while pending:
        node = pending.pop()
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        reads |= names
        for name in names & functions.keys() - seen:
            seen.add(name)
            pending.append(functions[name])
    return reads


def _is_test_case(node: ast.ClassDef) -> bool:
    return any(ast.unparse(b).split(".")[-1].endswith("TestCase") for b in node.bases)


def check_test(row: dict[str, Any], test: str, which: str) -> None:
    """RowError unless the test runs code that reads a name of the program (and runs the
    unittest classes it defines). `which` names the test in the message."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise RowError(f"{which} is not Python: {exc}") from None
    names = task_names(row, test)
    cases = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and _is_test_case(n)]
    calls = {n.func for n in ast.walk(tree) if isinstance(n, ast.Call)}
    runs_tests = any(ast.unparse(f).split(".")[-1] in _RUNNERS for f in calls)
    if cases and not runs_tests:
        raise RowError(
            f"{which} defines unittest.TestCase {', '.join(cases)} but never runs it: "
            "add `unittest.main(exit=False)`"
        )
    functions: dict[str, ast.AST] = {}
    for source in (names.given, test):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.setdefault(node.name, node)
    reads = _executed_reads(tree, functions, runs_tests)
    theirs = set(names.program) | set(names.maybe) | _from_solution(tree)
    if not reads & theirs:
        pytest_style = sorted(n for n in functions if n.startswith("test") and n not in reads)
        hint = ""
        if "check" in functions:
            hint = " (a HumanEval-style `check` needs its `check(entry_point)` line)"
        elif pytest_style:  # nothing collects test functions here, as pytest would
            hint = f" (nothing calls {', '.join(pytest_style[:3])}: call it at the end)"
        raise RowError(f"{which} never calls the program{hint}: the test would pass anything")
