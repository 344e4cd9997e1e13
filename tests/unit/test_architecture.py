"""The package's shape, read from its source with `ast` (nothing is imported but RunLayout,
whose file names are looked for): no import cycle, no import off the dependency list, no reach
into another package's private modules, no module over 400 lines, a reason on every
function-local import, every module on the map of docs/architecture.md; and the stage contract:
every stage takes its typed paths, no stage imports another, only store/ names a run's files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "rewardprof"
ARCHITECTURE = REPO / "docs" / "architecture.md"
MAX_LINES = 400
MAX_FUNCTION_LINES = 60  # from `def` (decorators aside) to its last line, docstring included
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


# The packages and what each may import besides itself (docs/architecture.md, "Dependencies"):
# an explicit list, not a total order, so a new arrow is a decision written here. The list is
# acyclic and respects the layers of the map (core at the bottom, cli at the top).
ALLOWED = {
    "core": set(),
    "decisions": {"core"},
    "store": {"core"},
    "engine": {"core"},
    "environments": {"core", "engine"},
    "train": {"core", "engine", "environments", "store"},  # a run's export, tasks, rollouts
    "sources": {"core", "environments"},
    "manifest": {"core", "environments", "store"},  # store: the warm start's earlier profile
    "testing": {"engine"},
    "stages": {"core", "decisions", "engine", "environments", "sources", "store"},
    "estimation": {"core", "decisions", "store"},  # sizing maths; shard and writer names
    "tools": {
        "core",
        "decisions",
        "engine",
        "environments",
        "estimation",
        "manifest",
        "sources",
        "stages",
        "store",
    },
    "cli": {"core", "manifest", "stages"},
}


def _package(module: str) -> str:
    """The first-level package (or module) of rewardprof that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _dependency_violations(
    edges: dict[str, set[str]], allowed: dict[str, set[str]] = ALLOWED
) -> list[str]:
    out = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            a, b = _package(module), _package(target)
            if a == b or b == "":  # own package; the package's docstring-only face
                continue
            if b not in allowed[a]:
                out.append(f"{module} -> {target} ({a} may import {sorted(allowed[a])})")
    return out


def test_every_package_is_on_the_dependency_list():
    assert {_package(m) for m in MODULES} - {""} == set(ALLOWED)


def test_the_dependency_list_has_no_cycle_and_names_only_packages():
    assert set().union(*ALLOWED.values()) <= set(ALLOWED)
    assert _cycles(ALLOWED) == []


def test_the_dependency_check_finds_arrows_not_on_the_list():
    edges = {
        "rewardprof.core.config": {"rewardprof.environments"},
        "rewardprof.store.journal": {"rewardprof.decisions.stats"},
        "rewardprof.engine.fleet": {"rewardprof.store.layout", "rewardprof.core.config"},
        "rewardprof.stages.merge": {"rewardprof.store.journal", "rewardprof.stages"},
    }
    assert _dependency_violations(edges) == [
        "rewardprof.core.config -> rewardprof.environments (core may import [])",
        "rewardprof.engine.fleet -> rewardprof.store.layout (engine may import ['core'])",
        "rewardprof.store.journal -> rewardprof.decisions.stats (store may import ['core'])",
    ]


def test_no_import_off_the_dependency_list():
    violations = _dependency_violations({m: _edges(m) for m in MODULES})
    assert not violations, "imports not on the dependency list: " + "; ".join(violations)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_reaches(module: str, tree: ast.Module) -> list[str]:
    """Imports of a private module (`pkg._wire`) from outside the package that holds it, and of
    a private name (`from pkg.mod import _helper`) from any other module."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for target in _sources(module, node):
            parts = target.split(".")
            for i, part in enumerate(parts):
                owner = ".".join(parts[:i])
                if _private(part) and module != owner and not module.startswith(owner + "."):
                    out.append(f"{module} -> {target}")
                    break
        if isinstance(node, ast.ImportFrom) and _base(module, node).startswith("rewardprof"):
            base = _base(module, node)
            out += [
                f"{module} -> {base}.{a.name}"
                for a in node.names
                if _private(a.name) and f"{base}.{a.name}" not in MODULES
            ]
    return out


def test_the_private_check_finds_reaches():
    tree = ast.parse(
        "from rewardprof.environments.code import _wire\n"
        "from rewardprof.store.journal import _scan\n"
        "import rewardprof.environments.code._values\n"
    )
    assert _private_reaches("rewardprof.tools.check", tree) == [
        "rewardprof.tools.check -> rewardprof.environments.code._wire",
        "rewardprof.tools.check -> rewardprof.store.journal._scan",
        "rewardprof.tools.check -> rewardprof.environments.code._values",
    ]
    # a sibling in environments/ is outside the code package too
    assert _private_reaches("rewardprof.environments.math", tree) == [
        "rewardprof.environments.math -> rewardprof.environments.code._wire",
        "rewardprof.environments.math -> rewardprof.store.journal._scan",
        "rewardprof.environments.math -> rewardprof.environments.code._values",
    ]
    assert _private_reaches("rewardprof.environments.code.harness", tree) == [
        "rewardprof.environments.code.harness -> rewardprof.store.journal._scan",
    ]


def test_no_reach_into_another_package_private_modules():
    reaches = [r for module, tree in TREES.items() for r in _private_reaches(module, tree)]
    assert not reaches, "imports of another package's private module or name: " + "; ".join(reaches)


def test_no_module_over_400_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in MODULES.values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _long_functions(tree: ast.Module, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1})"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_function_length_check_finds_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    tree = ast.parse(f"def short():\n    return 1\n\ndef long():\n{body}\n")
    assert _long_functions(tree) == ["long (61)"]


def test_no_function_over_60_lines():
    long = {
        str(MODULES[m].relative_to(PACKAGE)): found
        for m, tree in TREES.items()
        if (found := _long_functions(tree))
    }
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


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


# ---- the stage contract (docs/architecture.md, "The stage contract") --------------------------

STAGES_PACKAGE = "rewardprof.stages"


def _defines_run(tree: ast.Module) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"), None)


def _paths_classes(tree: ast.Module) -> set[str]:
    """The frozen dataclasses named `*Paths` that `tree` (stages/__init__.py) defines: frozen
    by their decorator, or by deriving from `FromLayout` (whose subclasses are made frozen
    dataclasses when they are defined), directly or through another such class."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    frozen = {"FromLayout"}
    for n in classes:  # in definition order: a base is defined before what derives from it
        bases = {ast.unparse(b) for b in n.bases}
        decorated = any(
            "dataclass" in ast.unparse(d) and "frozen=True" in ast.unparse(d)
            for d in n.decorator_list
        )
        if decorated or bases & frozen:
            frozen.add(n.name)
    return {name for name in frozen if name.endswith("Paths")}


def _untyped_runs(trees: dict[str, ast.Module], paths_classes: set[str]) -> list[str]:
    """Stage modules whose `run(cfg, paths)` does not take one of the paths classes."""
    out = []
    for module, tree in sorted(trees.items()):
        run = _defines_run(tree)
        if run is None or not module.startswith(STAGES_PACKAGE + "."):
            continue
        params = run.args.args
        names = [a.arg for a in params]
        hint = ast.unparse(params[1].annotation) if len(params) > 1 and params[1].annotation else ""
        if names != ["cfg", "paths"] or hint not in paths_classes:
            out.append(f"{module}: run({', '.join(names)}) takes paths: {hint or 'untyped'}")
    return out


def test_the_typed_paths_check_finds_an_untyped_stage():
    trees = {
        "rewardprof.stages.good": ast.parse("def run(cfg, paths: GoodPaths): ..."),
        "rewardprof.stages.bad": ast.parse("def run(cfg, paths: dict): ..."),
        "rewardprof.stages.worse": ast.parse("def run(cfg, paths): ..."),
    }
    assert _untyped_runs(trees, {"GoodPaths"}) == [
        "rewardprof.stages.bad: run(cfg, paths) takes paths: dict",
        "rewardprof.stages.worse: run(cfg, paths) takes paths: untyped",
    ]


def test_every_stage_takes_its_typed_paths():
    classes = _paths_classes(TREES[STAGES_PACKAGE])
    assert {"MaterializePaths", "RolloutPaths", "PriorPaths", "SavingsPaths"} <= classes
    bad = _untyped_runs(TREES, classes)
    assert not bad, "stages without their typed paths: " + "; ".join(bad)


def _stage_unit(module: str, modules: dict[str, Path]) -> str | None:
    """The stage a module of stages/ belongs to: its sub-package (stages.rollout, ...) or, for a
    flat module, itself if it defines `run`; None for the package and the flat helpers."""
    parts = module.split(".")
    if module == STAGES_PACKAGE or parts[:2] != ["rewardprof", "stages"]:
        return None
    sub = ".".join(parts[:3])
    if modules[sub].name == "__init__.py":  # a stage's sub-package
        return sub
    return module if _defines_run(TREES.get(module) or ast.parse("")) else None


def _reaches_between_stages(edges: dict[str, set[str]], unit_of) -> list[str]:
    """Imports of another stage (or its modules) from a stage or helper module of stages/, and
    of the rollout stage from anywhere outside it but the CLI."""
    out = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            unit = unit_of(target)
            if unit is None or unit == unit_of(module) or module == "rewardprof.cli":
                continue
            if module.startswith(STAGES_PACKAGE + ".") or unit == "rewardprof.stages.rollout":
                out.append(f"{module} -> {target}")
    return out


def test_the_stage_check_finds_reaches_into_another_stage():
    units = {
        "rewardprof.stages.profile": "rewardprof.stages.profile",
        "rewardprof.stages.rollout.shard_job": "rewardprof.stages.rollout",
        "rewardprof.stages.rollout.heartbeat": "rewardprof.stages.rollout",
        "rewardprof.stages.adaptive.prior": "rewardprof.stages.adaptive",
    }
    edges = {
        "rewardprof.stages.profile": {"rewardprof.stages.profile_summary", "rewardprof.stages"},
        "rewardprof.stages.adaptive.prior": {"rewardprof.stages.rollout.shard_job"},
        "rewardprof.stages.rollout.shard_job": {"rewardprof.stages.rollout.heartbeat"},
        "rewardprof.tools.status": {"rewardprof.stages.rollout.heartbeat"},
        "rewardprof.cli": {"rewardprof.stages.rollout.shard_job"},
        "rewardprof.stages.export": {"rewardprof.stages.profile"},
    }
    assert _reaches_between_stages(edges, units.get) == [
        "rewardprof.stages.adaptive.prior -> rewardprof.stages.rollout.shard_job",
        "rewardprof.stages.export -> rewardprof.stages.profile",
        "rewardprof.tools.status -> rewardprof.stages.rollout.heartbeat",
    ]


def test_no_stage_imports_another_stage():
    units = {m: _stage_unit(m, MODULES) for m in MODULES}
    reaches = _reaches_between_stages({m: _edges(m) for m in MODULES}, units.get)
    assert not reaches, "imports of another stage's modules: " + "; ".join(reaches)


def test_the_adaptive_stages_read_only_store_decisions_core():
    allowed = {"core", "decisions", "store", "stages"}
    off = [
        f"{m} -> {t}"
        for m in MODULES
        if m.startswith("rewardprof.stages.adaptive.")
        for t in sorted(_edges(m))
        if _package(t) not in allowed or t.startswith("rewardprof.stages.rollout")
    ]
    assert not off, "stages/adaptive/ importing more than store, decisions, core: " + "; ".join(off)


def _run_files() -> set[str]:
    """The names of the run directory's files (those with a suffix), as RunLayout gives them."""
    from rewardprof.store.layout import REPORT_FILES, RunLayout  # lazy: the one import here

    layout = RunLayout("results/r", 2)
    found = {v for v in vars(layout).values() if isinstance(v, Path)}
    for files in (layout.profile, layout.export):
        found |= {v for v in vars(files).values() if isinstance(v, Path)}
    names = {p.name for p in found} | set(REPORT_FILES.values())
    return {n for n in names if "." in n}


def _file_literals(tree: ast.Module, names: set[str]) -> list[str]:
    """String literals that name one of `names` (the name alone or a path ending in it; prose,
    which has spaces, is not a path)."""
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and not any(c.isspace() for c in n.value)
        and (n.value in names or n.value.rsplit("/", 1)[-1] in names)
    ]


def test_the_file_name_check_finds_a_run_file_named_outside_store():
    tree = ast.parse(
        'AUDIT = Path("adaptive") / "audit.json"\nx = "profile/tasks.parquet"\n'
        'msg = "see results/<run>/profile/tasks.parquet"\n"""writes audit.json"""\n'
    )
    assert sorted(_file_literals(tree, {"audit.json", "tasks.parquet"})) == [
        "audit.json",
        "profile/tasks.parquet",
    ]


def test_only_store_names_the_files_of_a_run_directory():
    names = _run_files()
    assert {
        "tasks.parquet",
        "report.json",
        "prior.json",
        "audit.json",
        "merge_report.json",
    } <= names
    named = [
        f"{m}: {lit!r}"
        for m, tree in TREES.items()
        if not m.startswith("rewardprof.store.")
        for lit in _file_literals(tree, names)
    ]
    assert not named, "run-directory files named outside store/: " + "; ".join(named)
