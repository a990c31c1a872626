"""The one-way layering of docs/architecture.md: cuco_tui -> engine -> remote. Neither engine/ nor remote/ may import
textual or cuco_tui, at the top of a module or nested inside a function; remote/ may not import engine/."""

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


STAGE_PACKAGES = ("search", "evaluation", "store", "timeline", "daemon")


@pytest.mark.parametrize("stage", STAGE_PACKAGES)
def test_stage_packages_hold_modules_and_re_export_nothing(stage):
    """engine/ is grouped by stage (docs/architecture.md): each stage's `__init__.py` is its docstring only, so
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
    engine/store/read_model."""
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
