"""The layering of docs/architecture.md, as four rules, each with its reason:

1. cuco_tui -> engine -> remote: neither engine/ nor remote/ may import textual or cuco_tui, and remote/ may not
   import engine/ (a run must keep going with no screen attached; a node needs only remote/).
2. engine/'s floors, top to bottom: a unit imports only from its own floor or the floors below it (`FLOORS`
   says why each floor is where it is).
3. No import circle among engine/'s units (a circle makes every unit in it load, and change, together).
4. No SQL in the viewers: every query a viewer runs is one of engine/views/ (one place to read the store from).

Imports count wherever they stand: at the top of a module, inside a function, under TYPE_CHECKING."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {"engine": {"textual", "cuco_tui"}, "remote": {"textual", "cuco_tui", "engine"}}


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module an import statement names (anywhere in the tree), and __import__/import_module
    calls with a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                found.append((node.lineno, node.args[0].value))
    return found


def violations(package: str) -> list[str]:
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for lineno, module in imported_modules(tree):
            if module.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(REPO)}:{lineno}: imports {module}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package):
    files = list((REPO / package).rglob("*.py"))
    assert len(files) >= 5, f"found only {len(files)} files under {package}/"
    assert violations(package) == []


FLOORS: list[tuple[str, frozenset[str], str]] = [
    (
        "views",
        frozenset({"views"}),
        "every query a viewer runs (the read model, report, best, liveness, lineage): nothing in the engine reads "
        "through it, so what a screen needs never reaches the loop",
    ),
    (
        "daemon",
        frozenset({"daemon"}),
        "serves a run over a socket: it starts the loop and forwards control to it; the loop never calls back",
    ),
    (
        "run",
        frozenset({"run"}),
        "one run's loop and what it writes (the ledger, control, the result's rows): it drives the stages, "
        "and nothing below it knows a run exists",
    ),
    (
        "stages",
        frozenset({"onboard", "search", "evaluation"}),
        "where a candidate is made, proposed and judged; each is usable alone (the CLI's onboarding, a test's "
        "evaluation) without a run",
    ),
    (
        "llm",
        frozenset({"llm"}),
        "model clients, prompts and the budget: used by the stages, it knows workloads and the store but no stage",
    ),
    ("workload", frozenset({"workload"}), "a workload folder read and checked: what every stage works on"),
    ("store", frozenset({"store"}), "persistence only: tables, blobs, run ids and which stored rows count"),
    (
        "ground",
        frozenset(
            {
                "contract",
                "config",
                "blocks",
                "design_space",
                "stages",
                "timeline",
                "symbol_policy",
                "candidate_view",
                "glossary",
            }
        ),
        "records and rules every floor shares (the contract, the run config, EVOLVE-BLOCKs, the design space, the "
        "stage names, timelines, the symbol policy): they import no floor above",
    ),
]
FLOOR_OF = {unit: i for i, (_, units, _) in enumerate(FLOORS) for unit in units}


def engine_imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """The engine modules one file of engine/ imports, relative imports resolved (`from .. import x` names
    engine.x when x is a module)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module == "engine":
                found += [(node.lineno, f"engine.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, module))
    return [(n, m) for n, m in found if m.startswith("engine.")]


def unit_of(module: str) -> str:
    """engine.run.engine -> run; engine.contract -> contract."""
    return module.split(".")[1]


def engine_edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted((REPO / "engine").rglob("*.py")):
        if "__pycache__" in path.parts or path == REPO / "engine" / "__init__.py":
            continue
        source = unit_of(".".join(path.relative_to(REPO).with_suffix("").parts))
        for lineno, module in engine_imports(path):
            target = unit_of(module)
            if target != source:
                edges.setdefault((source, target), []).append(f"{path.relative_to(REPO)}:{lineno}: imports {module}")
    return edges


def engine_units() -> set[str]:
    return {
        p.stem if p.is_file() else p.name
        for p in (REPO / "engine").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").exists())
    }


def test_every_unit_of_the_engine_is_on_a_floor():
    assert sorted(engine_units() - set(FLOOR_OF)) == []
    assert sorted(set(FLOOR_OF) - engine_units()) == []


def test_imports_run_down_the_floors_only():
    upward = [
        f"{where} ({FLOORS[FLOOR_OF[a]][0]} may not import {FLOORS[FLOOR_OF[b]][0]}, a floor above it)"
        for (a, b), wheres in sorted(engine_edges().items())
        if FLOOR_OF[b] < FLOOR_OF[a]
        for where in wheres
    ]
    assert upward == []


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm)."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_among_the_engines_units():
    assert circles(set(engine_edges())) == []


def test_the_circle_finder_sees_a_loop():
    assert circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert circles({("a", "b"), ("b", "c")}) == []


def test_the_floor_checker_resolves_relative_and_nested_imports():
    src = (
        "from .. import stages\nfrom ..store.store import Store\nfrom . import ledger\n"
        "def f():\n    from ..views import report\n"
        "if True:\n    import engine.daemon.daemon\n"
    )
    found = engine_imports(REPO / "engine" / "run" / "probe.py", src)
    assert sorted({unit_of(m) for _, m in found}) == ["daemon", "run", "stages", "store", "views"]


STAGE_PACKAGES = ("views", "daemon", "run", "search", "evaluation", "store", "timeline")


@pytest.mark.parametrize("stage", STAGE_PACKAGES)
def test_stage_packages_hold_modules_and_re_export_nothing(stage):
    """engine/'s packages hold modules (docs/architecture.md): each `__init__.py` is its docstring only, so
    importing one module never imports its neighbours (the GPU image imports engine.timeline.timeline alone)."""
    package = REPO / "engine" / stage
    assert len(list(package.glob("*.py"))) >= 2, f"engine/{stage}/ holds no module"
    tree = ast.parse((package / "__init__.py").read_text())
    assert ast.get_docstring(tree)
    assert [type(n).__name__ for n in tree.body[1:]] == []


def test_the_checker_sees_nested_imports():
    src = (
        "def f():\n    import textual.app\n"
        "class C:\n    def g(self):\n        from cuco_tui import cli\n"
        "x = __import__('textual')\n"
    )
    names = [m for _, m in imported_modules(ast.parse(src))]
    assert sorted(names) == ["cuco_tui", "textual", "textual.app"]


SQL = re.compile(r"\b(SELECT\s|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|PRAGMA\s)")


def sql_in(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals that read as SQL, and calls of an `execute` method: a viewer's queries belong in
    engine/views."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
            found.append((node.lineno, node.value[:60]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("execute", "executemany", "executescript")
        ):
            found.append((node.lineno, f"{node.func.attr}(...)"))
    return found


def test_no_sql_in_the_viewers():
    bad = [
        f"{path.relative_to(REPO)}:{lineno}: {what}"
        for path in sorted((REPO / "cuco_tui").rglob("*.py"))
        for lineno, what in sql_in(ast.parse(path.read_text(), filename=str(path)))
    ]
    assert bad == []


def test_the_sql_checker_sees_queries_and_executes():
    src = (
        'rows = view.fetch(f"SELECT id FROM candidates WHERE run_id=?", (r,))\n'
        'conn.execute("x")\nhelp = "select a run"\n'
    )
    assert sorted(what for _, what in sql_in(ast.parse(src))) == [
        "SELECT id FROM candidates WHERE run_id=?",
        "execute(...)",
    ]


def unexplained_nested_imports(path: Path, source: str | None = None) -> list[str]:
    """Imports inside a function of `path` with no comment saying why (on their line, or on the line above them or
    above the imports they follow): an import belongs at the top of its module unless it must wait."""
    lines = (path.read_text() if source is None else source).splitlines()
    found = []
    for fn in ast.walk(ast.parse("\n".join(lines), filename=str(path))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            i = node.lineno - 1
            while i > 0 and re.match(r"\s*(from|import)\s", lines[i - 1]) and "#" not in lines[i]:
                i -= 1  # a group of imports shares the reason given above its first
            if "#" not in lines[i] and "#" not in lines[i - 1]:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return sorted(set(found))


@pytest.mark.parametrize("package", ["engine", "remote"])
def test_imports_inside_functions_say_why(package):
    bad = [
        line
        for path in sorted((REPO / package).rglob("*.py"))
        if "__pycache__" not in path.parts
        for line in unexplained_nested_imports(path)
    ]
    assert bad == []


def test_the_nested_import_checker_wants_a_reason():
    src = (
        "def f():\n    import json\n"
        "def g():\n    # the SDK is optional\n    import anthropic\n    import openai\n"
        "def h():\n    import yaml  # heavy: only for this verb\n"
    )
    found = unexplained_nested_imports(REPO / "engine" / "probe.py", src)
    assert found == ["engine/probe.py:2: import json"]


def private_names_used(path: Path, source: str | None = None) -> list[str]:
    """Another module's `_name` that `path` imports (`from .x import _y`) or reads through a module it imported
    (`x._y`): what a module shares it names without an underscore."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in FORBIDDEN):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: imports {a.name}")
                modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in FORBIDDEN)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: reads {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("package", ["engine", "remote"])
def test_no_other_modules_private_names(package):
    bad = [
        line
        for path in sorted((REPO / package).rglob("*.py"))
        if "__pycache__" not in path.parts
        for line in private_names_used(path)
    ]
    assert bad == []


def test_the_private_name_checker_sees_imports_and_reads():
    src = "from .source import _parser, walk\nfrom .. import blocks\nx = blocks._START_RE\ny = os._exit\n"
    assert private_names_used(REPO / "engine" / "probe.py", src) == [
        "engine/probe.py:1: imports _parser",
        "engine/probe.py:3: reads blocks._START_RE",
    ]
