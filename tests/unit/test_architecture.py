"""The package's shape, read from its source with `ast` (nothing is imported): no import cycle,
no import against the layer table, no module over 400 lines, a reason on every function-local
import, every module on the map of docs/architecture.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "rewardprof"
ARCHITECTURE = REPO / "docs" / "architecture.md"
MAX_LINES = 400
# a trailing comment that gives the reason in one word first: `# lazy: matplotlib is slow`
REASON = re.compile(r"#\s*[a-z][a-z-]*:\s*\S")


def _module_name(path: Path) -> str:
    parts = ["rewardprof", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _function_scoped(tree: ast.Module) -> set[int]:
    """ids of the import nodes inside a function (at any depth)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(
                id(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)
            )
    return inside


def _base(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a `from ... import` reads from."""
    if not node.level:
        return node.module or ""
    package = module.split(".")  # relative: from the importing module's package
    if MODULES[module].name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join([*package, *([node.module] if node.module else [])])


def _sources(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement imports: `import a.b` -> a.b; `from a import b` -> a.b
    when that is a module of the package, else a (b is a name defined in a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = _base(module, node)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _edges(module: str) -> set[str]:
    """The package modules `module` imports, at module level or inside functions."""
    return {
        target
        for node in ast.walk(TREES[module])
        if isinstance(node, ast.Import | ast.ImportFrom)
        for target in _sources(module, node)
        if target in MODULES and target != module
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_is_found():
    assert "rewardprof.cli" in MODULES and "rewardprof.stages.merge" in MODULES


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    cycles = _cycles({m: _edges(m) for m in MODULES})
    assert not cycles, "modules that import each other (module or function level): " + "; ".join(
        ", ".join(c) for c in cycles
    )


# The packages from the ground up (docs/architecture.md, "Layers"). A module imports only from
# its own package or from a package on a lower layer: never up, never sideways (decisions and
# store know nothing of each other; engine knows no environment).
LAYERS = {
    "core": 0,
    "decisions": 1,
    "store": 1,
    "engine": 2,
    "environments": 3,
    "sources": 4,
    "manifest": 5,
    "testing": 5,
    "stages": 6,
    "tools": 7,
    "cli": 8,
}


def _package(module: str) -> str:
    """The first-level package (or module) of rewardprof that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer_violations(edges: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            a, b = _package(module), _package(target)
            if a == b or b == "":  # own package; the package's docstring-only face
                continue
            if LAYERS[b] >= LAYERS[a]:
                out.append(f"{module} -> {target} ({a} {LAYERS[a]}, {b} {LAYERS[b]})")
    return out


def test_every_package_has_a_layer():
    assert {_package(m) for m in MODULES} - {""} == set(LAYERS)


def test_the_layer_check_finds_upward_and_sideways_imports():
    edges = {
        "rewardprof.core.config": {"rewardprof.environments"},
        "rewardprof.store.journal": {"rewardprof.decisions.stats"},
        "rewardprof.stages.merge": {"rewardprof.store.journal", "rewardprof.stages"},
    }
    assert _layer_violations(edges) == [
        "rewardprof.core.config -> rewardprof.environments (core 0, environments 3)",
        "rewardprof.store.journal -> rewardprof.decisions.stats (store 1, decisions 1)",
    ]


def test_no_import_against_the_layers():
    violations = _layer_violations({m: _edges(m) for m in MODULES})
    assert not violations, "imports up or sideways across layers: " + "; ".join(violations)


def test_no_module_over_400_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in MODULES.values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_every_function_local_import_says_why():
    """`# lazy: ...` (start-up time), `# cycle: ...`, `# optional: ...` (an extra that may be
    missing) or the like, on the import's own line(s); the standard library included."""
    missing = []
    for module, tree in TREES.items():
        lines = MODULES[module].read_text().splitlines()
        inside = _function_scoped(tree)
        for node in ast.walk(tree):
            if id(node) not in inside:
                continue
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            if not REASON.search(text):
                where = MODULES[module].relative_to(PACKAGE)
                missing.append(f"{where}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not missing, "function-local imports without a reason:\n" + "\n".join(missing)


def _is_code(path: Path) -> bool:
    """Not a package __init__.py that holds nothing but its docstring."""
    body = ast.parse(path.read_text()).body
    if path.name != "__init__.py":
        return True
    docstring = (
        body[:1] and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    )
    return len(body) > (1 if docstring else 0)


def test_every_module_is_on_the_architecture_map():
    text = ARCHITECTURE.read_text()
    absent = [
        rel
        for p in MODULES.values()
        if _is_code(p) and (rel := str(p.relative_to(PACKAGE))) not in text
    ]
    assert not absent, f"modules not named in {ARCHITECTURE.relative_to(REPO)}: {absent}"
