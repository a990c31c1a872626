"""docs/architecture.md's table of which engine/ units import which is the imports as they are: a change
that adds or drops an import between two units fails here until the table says so."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENGINE = REPO / "engine"


def unit_imports() -> dict[str, dict[str, bool]]:
    """{unit: {unit it imports: whether only inside functions}}; a unit is a top-level module of engine/ or a
    folder of it."""
    found: dict[str, dict[str, bool]] = defaultdict(dict)
    for path in ENGINE.rglob("*.py"):
        parts = path.relative_to(ENGINE).parts
        unit = parts[0].removesuffix(".py")
        if unit == "__init__":
            continue
        package = ["engine", *parts[:-1]]
        tree = ast.parse(path.read_text(), filename=str(path))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                # `from .. import blocks`, `from engine import blocks`: the names are the modules
                modules = [f"{module}.{a.name}" for a in node.names] if module == "engine" else [module]
            else:
                continue
            for module in modules:
                names = module.split(".")
                if names[0] != "engine" or len(names) < 2 or names[1] in (unit, "__init__"):
                    continue
                nested = id(node) not in top_level
                found[unit][names[1]] = found[unit].get(names[1], True) and nested
    return found


def documented() -> tuple[set[str], dict[str, dict[str, bool]]]:
    """(the units said to import nothing, {unit: {unit: starred}}) from the doc's first code block."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = re.search(r"```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md: no import table"
    ground: set[str] = set()
    table: dict[str, dict[str, bool]] = {}
    for line in block.group(1).splitlines():
        if line.endswith("import nothing of engine/"):
            ground = {u.strip().rstrip("/") for u in line.split("import nothing")[0].split(",")}
            continue
        unit, _, rest = line.partition("->")
        rest = re.sub(r"\([^)]*\)", "", rest)  # what a line adds in parentheses is commentary
        table[unit.strip().rstrip("/").removesuffix(".py")] = {
            t.strip().rstrip("*"): t.strip().endswith("*") for t in rest.split(",") if t.strip()
        }
    return ground, table


def test_the_documented_imports_are_the_imports():
    actual = unit_imports()
    ground, table = documented()
    assert ground, "docs/architecture.md: no line of units that import nothing"
    units = {p.name.removesuffix(".py") for p in ENGINE.iterdir() if not p.name.startswith("__")}
    units = {u for u in units if (ENGINE / u).is_dir() or (ENGINE / f"{u}.py").is_file()}
    assert ground | set(table) == units, "every unit of engine/ has its line"
    for unit in ground:
        assert unit not in actual, f"{unit} imports {sorted(actual[unit])}"
    assert {u: actual[u] for u in table} == table
