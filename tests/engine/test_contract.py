"""The contract between the engine and its viewers (engine/contract.py): only declared events are written,
each reads back as the record that was written, every declared kind has an emitter, and no viewer handles a
kind the contract does not declare. Real SQLite store in tmp_path; the static checks read the source."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from engine import contract
from engine.contract import (
    EVENTS,
    KINDS,
    Best,
    BestRef,
    CandidateAdded,
    Log,
    Result,
    UndeclaredEvent,
    config_results,
    decode,
)
from engine.store.store import Batch, ReadStore, Store

REPO = Path(__file__).resolve().parents[2]
VIEWERS = ("cuco_tui",)  # where events are handled
EMITTERS = ("engine", "remote")  # where they are written
# `kind` values viewers compare that are not events: a cluster's kind (remote/cluster), a result flag's
# (engine/store/counting.py).
NOT_EVENTS = {"slurm", "ssh", "beyond_overlap_bound"}


@pytest.fixture
async def store(tmp_path: Path):
    s = await Store(tmp_path / "home").open()
    try:
        yield s
    finally:
        await s.close()


@dataclasses.dataclass(frozen=True)
class Nodes(contract.Event):
    """Looks like an event, but the contract does not declare it."""

    kind = "nodes"
    nodes: list


async def test_an_undeclared_event_is_refused_and_nothing_is_written(store: Store):
    with pytest.raises(UndeclaredEvent, match="nodes|Nodes"):
        await store.event("r1", Nodes(nodes=[]))
    with pytest.raises(UndeclaredEvent):
        await store.event("r1", "nodes")  # a bare kind string is no record
    with pytest.raises(UndeclaredEvent):
        async with store.transaction() as tx:
            await tx.event("r1", {"kind": "best", "id": 1})
    with pytest.raises(UndeclaredEvent):
        Batch().event("r1", Nodes(nodes=[]))
    assert await store.fetchall("SELECT * FROM events") == []


async def test_each_record_reads_back_as_written(store: Store):
    samples = [
        Best(id=7, speedup=1.25, time_ms=3.5),
        Result(
            id=7,
            status="done",
            correct=True,
            speedup=1.25,
            time_ms=3.5,
            reason=None,
            fitness=1.25,
            review="needs_review",
        ),
        CandidateAdded(
            id=8,
            number=2,
            island=1,
            generation=1,
            parent=7,
            operator="knob",
            mutator="design-space",
            status="pending",
            cell="c0",
        ),
    ]
    for record in samples:
        await store.event("r1", record)
    delivered = []
    store.on_event = delivered.append
    await store.event("r1", Log(level="warning", message="hot"))
    rs = ReadStore(store.home)
    try:
        read = [decode(e) for e in rs.events_since(0)]
    finally:
        rs.close()
    assert [e.event for e in read] == samples + [Log(level="warning", message="hot")]
    assert all(e.run == "r1" and e.seq for e in read)
    assert decode(delivered[0]).event == Log(level="warning", message="hot")  # the live path decodes alike
    assert read[0].event.ref == BestRef(7, 1.25, 3.5)


def test_decode_reads_another_versions_events():
    old = decode(
        {
            "seq": 3,
            "run": "r",
            "ts": 1.0,
            "kind": "result",
            "data": {"id": 2, "status": "failed", "extra": "a newer field"},
        }
    )
    assert old.event == Result(
        id=2, status="failed", correct=None, speedup=None, time_ms=None, reason=None, fitness=None, review=None
    )
    assert decode({"seq": 4, "kind": "telemetry", "data": {}}) is None  # a kind from a newer cuco: skipped


def test_config_results_read_either_shape_and_skip_junk():
    staged = {
        "benchmark": {
            "configs": [
                {"name": "small", "speedup": 1.5, "baseline_ms": 2, "candidate_ms": "?"},
                {"speedup": 9.0},
                "junk",
            ]
        }
    }
    assert [(c.name, c.speedup, c.baseline_ms, c.candidate_ms) for c in config_results(staged)] == [
        ("small", 1.5, 2, None)
    ]
    assert [c.name for c in config_results({"configs": [{"name": "flat"}]})] == ["flat"]
    assert config_results(None) == [] and config_results({"benchmark": "x"}) == []


# ----- static checks: emitters and viewers against the contract --------------------------------------------


def _files(*packages: str) -> list[Path]:
    return [p for pkg in packages for p in sorted((REPO / pkg).rglob("*.py"))]


def emitted_records(tree: ast.AST) -> list[tuple[int, str]]:
    """`x.event(run, Record(...))`: the record constructors passed to an event write."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "event"
            and len(node.args) == 2
        ):
            arg = node.args[1]
            name = arg.func.id if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) else ast.unparse(arg)
            found.append((node.lineno, name))
    return found


def handled_kinds(tree: ast.AST) -> list[tuple[int, str]]:
    """Kind strings a viewer switches on: `kind == "x"`, `kind in ("x", ...)`, `e["kind"] == "x"`,
    `e.get("kind") == "x"`, `e.kind == "x"`."""

    def names_kind(expr: ast.AST) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id == "kind"
        if isinstance(expr, ast.Attribute):
            return expr.attr == "kind"
        if isinstance(expr, ast.Subscript):
            return isinstance(expr.slice, ast.Constant) and expr.slice.value == "kind"
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get":
            return bool(expr.args) and isinstance(expr.args[0], ast.Constant) and expr.args[0].value == "kind"
        return False

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and names_kind(node.left):
            for comp in node.comparators:
                consts = comp.elts if isinstance(comp, (ast.Tuple, ast.List, ast.Set)) else [comp]
                found += [
                    (node.lineno, c.value) for c in consts if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]
    return found


def test_every_emitter_writes_a_declared_record():
    declared = {e.__name__ for e in EVENTS}
    bad, seen = [], set()
    for path in _files(*EMITTERS):
        if path.name == "contract.py":
            continue
        for lineno, name in emitted_records(ast.parse(path.read_text())):
            if path.name == "store.py" and name == "record":  # the store's own pass-through
                continue
            seen.add(name)
            if name not in declared:
                bad.append(f"{path.relative_to(REPO)}:{lineno}: writes {name}, not a record of engine/contract.py")
    assert bad == []
    assert declared - seen == set(), "declared kinds nothing emits (declare only what the engine writes)"


def test_no_viewer_handles_an_undeclared_kind():
    bad = []
    for path in _files(*VIEWERS):
        for lineno, kind in handled_kinds(ast.parse(path.read_text())):
            if kind not in KINDS and kind not in NOT_EVENTS:
                bad.append(f"{path.relative_to(REPO)}:{lineno}: handles event kind {kind!r}, undeclared")
    assert bad == []


def test_the_checkers_see_what_they_look_for():
    viewer = (
        "def on(event, e):\n    kind = event.get('kind')\n    if kind == 'nodes': pass\n"
        "    elif kind in ('best', 'review'): pass\n    if e['kind'] == 'x' or e.kind == 'y': pass\n"
    )
    assert sorted(k for _, k in handled_kinds(ast.parse(viewer))) == ["best", "nodes", "review", "x", "y"]
    emitter = "async def f(tx):\n    await tx.event(r, Best(id=1))\n    tx.event(r, 'nodes')\n"
    assert sorted(n for _, n in emitted_records(ast.parse(emitter))) == ["'nodes'", "Best"]
