"""cuco_tui's modules import each other in one direction: no import circle among them, counting every import
statement (at the top of a module or nested in a function or class), no module takes another's private
`_names`, and an import inside a function says why it is not at the top. Each checker is also tried on small
synthetic packages, so a pass means it can see what it checks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.test_layering import circles as engine_circles

REPO = Path(__file__).resolve().parents[1]
PROJECT = ("cuco_tui", "engine", "remote")  # private names of these packages stay in their modules


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package by its own name)."""
    names = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module, the names taken from it) for each import anywhere in the file, relative ones resolved;
    `from package import module` counts as importing the module."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            taken = [a.name for a in node.names]
            yield node.lineno, target, [t for t in taken if f"{target}.{t}" not in modules]
            for t in taken:
                if f"{target}.{t}" in modules:
                    yield node.lineno, f"{target}.{t}", []


def import_graph(root: Path, package: str) -> tuple[dict[str, set[str]], list[str]]:
    """Who imports whom among the package's modules (importing `a.b.c` runs `a` and `a.b` first, so it
    imports those too, unless the importer lies inside them), and each import of another module's private
    name."""
    modules = module_names(root, package)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for name, path in modules.items():
        for lineno, target, taken in imports_of(name, path, modules):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                # a package the importer lies in has run already: that is nesting, not an import
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    graph[name].add(prefix)
            for t in taken:
                if t.startswith("_") and not t.startswith("__") and target.split(".")[0] in (package, *PROJECT):
                    private.append(f"{path.relative_to(root)}:{lineno}: takes {target}.{t}")
    return graph, private


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected set of two or more modules (the engine's checker's)."""
    edges = {(a, b) for a, targets in graph.items() for b in targets}
    return engine_circles(edges)


def unexplained_nested_imports(path: Path) -> list[int]:
    """Lines of imports inside a function or class with no comment just above them (or above the imports
    they follow) saying why they are not at the top."""
    text = path.read_text()
    lines = text.split("\n")
    tree = ast.parse(text, filename=str(path))
    top = {id(node) for node in tree.body}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            above = node.lineno - 2
            while above >= 0 and (not lines[above].strip() or lines[above].lstrip().startswith(("import ", "from "))):
                above -= 1
            if above < 0 or not lines[above].lstrip().startswith("#"):
                bad.append(node.lineno)
    return bad


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_no_import_circle_among_cuco_tuis_modules():
    graph, _ = import_graph(REPO, "cuco_tui")
    assert len(graph) >= 30, f"found only {len(graph)} modules under cuco_tui/"
    assert "cuco_tui.verbs.registry" in graph["cuco_tui.cli"]  # the checker reads this tree
    assert circles(graph) == []


def test_no_module_takes_anothers_private_names():
    _, private = import_graph(REPO, "cuco_tui")
    assert private == []


def test_an_import_inside_a_function_says_why_it_is_not_at_the_top():
    bad = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "cuco_tui").rglob("*.py"))
        for line in unexplained_nested_imports(path)
    ]
    assert bad == []


def test_the_nested_import_checker_wants_a_reason(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import os\n\n"
        "def f():\n    import json\n\n"
        "def g():\n    # heavy: only g needs it\n    import csv\n    from io import StringIO\n"
    )
    assert unexplained_nested_imports(path) == [4]


def test_the_checker_sees_a_circle_through_an_import_nested_in_a_function(tmp_path):
    root = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import thing\n",
            "pkg/b.py": "def thing():\n    from pkg.sub import c\n    return c\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "class C:\n    def m(self):\n        from .. import a\n",
            "pkg/d.py": "from . import b\n",
        },
    )
    graph, _ = import_graph(root, "pkg")
    assert graph["pkg.b"] == {"pkg.sub", "pkg.sub.c"}
    assert graph["pkg.d"] == {"pkg.b"}
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_the_checker_passes_a_one_way_package_and_sees_a_circle_through_a_package(tmp_path):
    one_way = write_package(
        tmp_path / "ok",
        {"pkg/__init__.py": "", "pkg/top.py": "from .low import f\n", "pkg/low.py": "import os\n"},
    )
    assert circles(import_graph(one_way, "pkg")[0]) == []
    # low imports the package `pkg.ui`, whose __init__ imports top, which imports low
    through_init = write_package(
        tmp_path / "init",
        {
            "pkg/__init__.py": "",
            "pkg/ui/__init__.py": "from ..top import f\n",
            "pkg/top.py": "from .low import g\n",
            "pkg/low.py": "def g():\n    import pkg.ui\n",
        },
    )
    assert circles(import_graph(through_init, "pkg")[0]) == [["pkg.low", "pkg.top", "pkg.ui"]]


def test_the_checker_sees_private_names_taken_across_modules(tmp_path):
    root = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "_x = 1\n__all__ = []\n",
            "pkg/b.py": "from textual.app import _private\ndef f():\n    from .a import _x, __all__\n",
            "pkg/c.py": "from engine.store.store import _secret\n",
        },
    )
    _, private = import_graph(root, "pkg")
    assert private == ["pkg/b.py:3: takes pkg.a._x", "pkg/c.py:1: takes engine.store.store._secret"]
