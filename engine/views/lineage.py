"""Read-side queries for a candidate's lineage: its ancestors back to generation 0, its children one level
at a time, and the path from the seed to the run's best.

Lazy by design (usable at 100,000 candidates): the ancestors are one recursive query walking the primary
key (a fork's copy continues into its original's run through `origin_id`), the newest ANCESTORS_SHOWN
first and more on request; children come from the `candidates_parent` index one parent at a time, when a
tree node is opened; the path to the best is walked once per best and kept (BestPaths), a new best only
walking up to where it joins the old path. Nothing scans the run.
Every function takes `fetch(sql, params) -> rows` (a ReadModel's connection for its thread); the TUI draws
the nodes (cuco_tui/lineage_view.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .best import top_candidates

Fetch = Callable[[str, Any], list[dict[str, Any]]]

MAX_DEPTH = 10_000_000  # a guard against a cycle in corrupt data, far beyond any real search
ANCESTORS_SHOWN = 500  # the newest ancestors read at once; older ones on request
WALK_STEP = 2000  # the best's path is walked in steps of this many generations
CHILDREN_SHOWN = 200  # per parent: a tree node opens with the best 200 children (by speedup), and says so
_COLUMNS = (
    "c.id, c.run_id, c.parent_id, c.origin_id, c.generation, c.island, c.operator, c.mutator, c.status, "
    "c.speedup, c.inspiration_ids"
)


@dataclass
class LineageNode:
    id: int
    run_id: str
    parent_id: int | None  # the parent in the lineage: parent_id, or a fork's original (origin_id)
    generation: int
    island: int
    operator: str
    mutator: str
    status: str
    speedup: float | None
    inspirations: list[int] = field(default_factory=list)
    delta: float | None = None  # speedup change over the parent (both measured), else None
    children: int = 0  # how many children it has (its subtree is loaded when opened)
    on_best_path: bool = False  # on the path from the seed to the run's best
    migrated: str = ""  # "0->1": it was copied to another island by a migration

    @property
    def edge(self) -> str:
        """What made it: the operator and, where it says more, the mutator (an LLM model, fork, ...)."""
        if self.operator == "seed":
            return "seed"
        mutator = self.mutator.removeprefix("llm:")
        return self.operator if mutator in ("design-space", self.operator, "") else f"{self.operator} {mutator}"


def _node(row: dict[str, Any]) -> LineageNode:
    try:
        inspirations = [int(i) for i in json.loads(row.get("inspiration_ids") or "[]")]
    except (ValueError, TypeError):
        inspirations = []
    parent = row["parent_id"] if row["parent_id"] is not None else row.get("origin_id")
    return LineageNode(
        id=row["id"],
        run_id=row["run_id"],
        parent_id=parent,
        generation=row["generation"],
        island=row["island"],
        operator=row["operator"],
        mutator=row["mutator"],
        status=row["status"],
        speedup=row["speedup"],
        inspirations=inspirations,
    )


def ancestors(fetch: Fetch, candidate_id: int, limit: int = MAX_DEPTH) -> list[LineageNode]:
    """The candidate and its ancestors (at most `limit` of them), the oldest first: the seed (generation 0)
    when the chain is complete (chain[0].parent_id is None); a fork's copy continues into the run it was
    forked from. Speedup deltas are filled along the chain."""
    rows = fetch(
        "WITH RECURSIVE up(id, depth) AS (SELECT ?, 0 UNION ALL "
        "SELECT COALESCE(c.parent_id, c.origin_id), up.depth + 1 FROM candidates c JOIN up ON c.id = up.id "
        "WHERE COALESCE(c.parent_id, c.origin_id) IS NOT NULL AND up.depth < ?) "
        f"SELECT {_COLUMNS}, up.depth FROM up JOIN candidates c ON c.id = up.id ORDER BY up.depth DESC",
        (candidate_id, limit),
    )
    chain = [_node(r) for r in rows]
    for parent, child in zip(chain, chain[1:]):
        child.delta = _delta(parent.speedup, child.speedup)
    return chain


def _walk_up(fetch: Fetch, candidate_id: int, steps: int) -> list[int]:
    """Ids only, newest first: the candidate and up to `steps` ancestors (reads no more than each row's head)."""
    rows = fetch(
        "WITH RECURSIVE up(id, depth) AS (SELECT ?, 0 UNION ALL "
        "SELECT COALESCE(c.parent_id, c.origin_id), up.depth + 1 FROM candidates c JOIN up ON c.id = up.id "
        "WHERE COALESCE(c.parent_id, c.origin_id) IS NOT NULL AND up.depth < ?) SELECT id FROM up",
        (candidate_id, steps),
    )
    return [r["id"] for r in rows]


class BestPaths:
    """The path from the seed to each run's best, walked once per best and kept: a new best (most often a
    descendant of the old one, or close to it) walks up only until it meets the old path. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: dict[str, tuple[int, list[int], dict[int, int]]] = {}  # run -> best, root-first, index

    def get(self, fetch: Fetch, run_id: str) -> tuple[int | None, set[int]]:
        best = best_id(fetch, run_id)
        with self._lock:
            known = self._paths.get(run_id)
            if best is None:
                return None, set()
            if known is not None and known[0] == best:
                return best, set(known[2])
            old_path, old_index = (known[1], known[2]) if known else ([], {})
            fresh: list[int] = []  # newest first, down to where it meets the old path
            cur: int | None = best
            while cur is not None:
                ids = _walk_up(fetch, cur, WALK_STEP)
                hit = next((i for i, cid in enumerate(ids) if cid in old_index), None)
                if hit is not None:
                    fresh += ids[:hit]
                    path = old_path[: old_index[ids[hit]] + 1] + fresh[::-1]
                    break
                fresh += ids[:-1] if len(ids) > WALK_STEP else ids
                cur = ids[-1] if len(ids) > WALK_STEP else None
            else:
                path = fresh[::-1]
            self._paths[run_id] = (best, path, {cid: i for i, cid in enumerate(path)})
            return best, set(path)


def _delta(parent: float | None, child: float | None) -> float | None:
    return None if parent is None or child is None else child - parent


def children(fetch: Fetch, parent: LineageNode, limit: int = CHILDREN_SHOWN) -> list[LineageNode]:
    """The children of `parent` (the best `limit` by speedup first, then the unmeasured ones)."""
    rows = fetch(
        f"SELECT {_COLUMNS} FROM candidates c WHERE c.parent_id = ? "
        "ORDER BY c.speedup IS NULL, c.speedup DESC, c.id LIMIT ?",
        (parent.id, limit),
    )
    out = [_node(r) for r in rows]
    for child in out:
        child.delta = _delta(parent.speedup, child.speedup)
    return out


def child_counts(fetch: Fetch, ids: list[int]) -> dict[int, int]:
    """How many children each of `ids` has (index only)."""
    counts: dict[int, int] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for r in fetch(
            f"SELECT parent_id, COUNT(*) AS n FROM candidates WHERE parent_id IN ({marks}) GROUP BY parent_id", chunk
        ):
            counts[r["parent_id"]] = r["n"]
    return counts


def best_id(fetch: Fetch, run_id: str) -> int | None:
    """The run's best correct candidate (the top of candidates_run_fitness), as the header shows it."""
    rows = top_candidates(fetch, run_id, 1, "c.id")
    return rows[0]["id"] if rows else None


def migrations(fetch: Fetch, run_id: str) -> dict[int, str]:
    """Candidates that migrations copied to another island ('src->dst'); the log is small (one row each)."""
    return {
        r["candidate_id"]: f"{r['src_island']}->{r['dst_island']}"
        for r in fetch("SELECT candidate_id, src_island, dst_island FROM migrations_log WHERE run_id=?", (run_id,))
    }


@dataclass
class Lineage:
    """What the lineage screen and tab show for one candidate."""

    focus: int
    chain: list[LineageNode]  # the oldest read first (the seed, when complete), the focus last
    children: list[LineageNode]  # the focus's children (their own children load when opened)
    best: int | None
    best_path: set[int]  # empty until known (see mark_best_path)

    @property
    def complete(self) -> bool:
        """The chain reaches generation 0 (else older ancestors are still to be read)."""
        return bool(self.chain) and self.chain[0].parent_id is None


def lineage(
    fetch: Fetch, run_id: str, candidate_id: int, best_paths: BestPaths | None = None, limit: int = ANCESTORS_SHOWN
) -> Lineage:
    """The candidate's lineage; with `best_paths`, the path to the best is marked (it may take a walk the
    first time), else it is left for mark_best_path."""
    chain = ancestors(fetch, candidate_id, limit)
    focus = chain[-1] if chain else None
    kids = children(fetch, focus) if focus else []
    decorate(fetch, run_id, chain + kids, set())
    data = Lineage(candidate_id, chain, kids, None, set())
    if best_paths is not None:
        mark_best_path(fetch, run_id, data, best_paths)
    return data


def mark_best_path(fetch: Fetch, run_id: str, data: Lineage, best_paths: BestPaths) -> None:
    data.best, data.best_path = best_paths.get(fetch, run_id)
    for node in data.chain + data.children:
        node.on_best_path = node.id in data.best_path


def decorate(fetch: Fetch, run_id: str, nodes: list[LineageNode], best_path: set[int]) -> None:
    """Child counts, the best-path mark and migrations, for nodes about to be shown."""
    counts = child_counts(fetch, [n.id for n in nodes])
    moved = migrations(fetch, run_id)
    for n in nodes:
        n.children = counts.get(n.id, 0)
        n.on_best_path = n.id in best_path
        n.migrated = moved.get(n.id, "")
