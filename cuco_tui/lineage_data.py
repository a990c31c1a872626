"""Read-side queries for a candidate's lineage: its ancestors back to generation 0, its children one level
at a time, and the path from the seed to the run's best.

Lazy by design (usable at 100,000 candidates): the ancestors are one recursive query walking the primary
key (a fork's copy continues into its original's run through `origin_id`); children come from the
`candidates_parent` index one parent at a time, when a tree node is opened; nothing scans the run.
Every function takes `fetch(sql, params) -> rows` (a StoreView's connection for its thread).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from rich.text import Text

Fetch = Callable[[str, Any], list[dict[str, Any]]]

MAX_DEPTH = 100_000      # a guard against a cycle in corrupt data, far beyond any real search
CHILDREN_SHOWN = 200     # per parent: a tree node opens with the best 200 children (by speedup), and says so
_COLUMNS = ("c.id, c.run_id, c.parent_id, c.origin_id, c.generation, c.island, c.operator, c.mutator, c.status, "
            "c.speedup, c.inspiration_ids")


@dataclass
class LineageNode:
    id: int
    run_id: str
    parent_id: int | None        # the parent in the lineage: parent_id, or a fork's original (origin_id)
    generation: int
    island: int
    operator: str
    mutator: str
    status: str
    speedup: float | None
    inspirations: list[int] = field(default_factory=list)
    delta: float | None = None   # speedup change over the parent (both measured), else None
    children: int = 0            # how many children it has (its subtree is loaded when opened)
    on_best_path: bool = False   # on the path from the seed to the run's best
    migrated: str = ""           # "0->1": it was copied to another island by a migration

    @property
    def edge(self) -> str:
        """What made it: the operator and, where it says more, the mutator (an LLM model, fork, ...)."""
        if self.operator == "seed":
            return "seed"
        mutator = self.mutator.removeprefix("llm:")
        return self.operator if mutator in ("design-space", self.operator, "") else f"{self.operator} {mutator}"

    def label(self, focus: bool = False) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.on_best_path:
            text.append("★ ", style="bold yellow")
        if focus:
            text.append("● ", style="bold")
        text.append(f"#{self.id}", style="bold" if self.on_best_path else "")
        text.append(f" g{self.generation} i{self.island} ", style="dim")
        text.append(self.edge, style="cyan")
        if self.speedup is not None:
            text.append(f" {self.speedup:.3f}x", style="bold green" if self.on_best_path else "green")
        else:
            text.append(f" {self.status}", style="red" if self.status in ("incorrect", "failed") else "dim")
        if self.delta is not None:
            text.append(f" {self.delta:+.3f}", style="green" if self.delta > 0 else ("red" if self.delta < 0 else "dim"))
        if self.inspirations:
            text.append(" insp " + " ".join(f"#{i}" for i in self.inspirations[:4]), style="magenta")
        if self.migrated:
            text.append(f" migrated {self.migrated}", style="blue")
        if self.children:
            text.append(f" ({self.children} children)", style="dim")
        return text


def _node(row: dict[str, Any]) -> LineageNode:
    try:
        inspirations = [int(i) for i in json.loads(row.get("inspiration_ids") or "[]")]
    except (ValueError, TypeError):
        inspirations = []
    parent = row["parent_id"] if row["parent_id"] is not None else row.get("origin_id")
    return LineageNode(id=row["id"], run_id=row["run_id"], parent_id=parent, generation=row["generation"],
                       island=row["island"], operator=row["operator"], mutator=row["mutator"], status=row["status"],
                       speedup=row["speedup"], inspirations=inspirations)


def ancestors(fetch: Fetch, candidate_id: int) -> list[LineageNode]:
    """The candidate and its ancestors, the seed (generation 0) first; a fork's copy continues into the run
    it was forked from. Speedup deltas are filled along the chain."""
    rows = fetch(
        "WITH RECURSIVE up(id, depth) AS (SELECT ?, 0 UNION ALL "
        "SELECT COALESCE(c.parent_id, c.origin_id), up.depth + 1 FROM candidates c JOIN up ON c.id = up.id "
        "WHERE COALESCE(c.parent_id, c.origin_id) IS NOT NULL AND up.depth < ?) "
        f"SELECT {_COLUMNS}, up.depth FROM up JOIN candidates c ON c.id = up.id ORDER BY up.depth DESC",
        (candidate_id, MAX_DEPTH))
    chain = [_node(r) for r in rows]
    for parent, child in zip(chain, chain[1:]):
        child.delta = _delta(parent.speedup, child.speedup)
    return chain


def _delta(parent: float | None, child: float | None) -> float | None:
    return None if parent is None or child is None else child - parent


def children(fetch: Fetch, parent: LineageNode, limit: int = CHILDREN_SHOWN) -> list[LineageNode]:
    """The children of `parent` (the best `limit` by speedup first, then the unmeasured ones)."""
    rows = fetch(f"SELECT {_COLUMNS} FROM candidates c WHERE c.parent_id = ? "
                 "ORDER BY c.speedup IS NULL, c.speedup DESC, c.id LIMIT ?", (parent.id, limit))
    out = [_node(r) for r in rows]
    for child in out:
        child.delta = _delta(parent.speedup, child.speedup)
    return out


def child_counts(fetch: Fetch, ids: list[int]) -> dict[int, int]:
    """How many children each of `ids` has (index only)."""
    counts: dict[int, int] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for r in fetch(f"SELECT parent_id, COUNT(*) AS n FROM candidates WHERE parent_id IN ({marks}) "
                       "GROUP BY parent_id", chunk):
            counts[r["parent_id"]] = r["n"]
    return counts


def best_id(fetch: Fetch, run_id: str) -> int | None:
    """The run's best correct candidate (the top of candidates_run_fitness), as the header shows it."""
    rows = fetch("SELECT id FROM candidates WHERE run_id=? AND status='done' AND fitness IS NOT NULL "
                 "AND speedup IS NOT NULL ORDER BY fitness DESC LIMIT 1", (run_id,))
    return rows[0]["id"] if rows else None


def migrations(fetch: Fetch, run_id: str) -> dict[int, str]:
    """Candidates that migrations copied to another island ('src->dst'); the log is small (one row each)."""
    return {r["candidate_id"]: f"{r['src_island']}->{r['dst_island']}"
            for r in fetch("SELECT candidate_id, src_island, dst_island FROM migrations_log WHERE run_id=?",
                           (run_id,))}


@dataclass
class Lineage:
    """What the lineage screen and tab show for one candidate."""

    focus: int
    chain: list[LineageNode]          # seed first, the focus last
    children: list[LineageNode]       # the focus's children (their own children load when opened)
    best: int | None
    best_path: set[int]


def lineage(fetch: Fetch, run_id: str, candidate_id: int) -> Lineage:
    chain = ancestors(fetch, candidate_id)
    best = best_id(fetch, run_id)
    best_path = {n.id for n in ancestors(fetch, best)} if best is not None else set()
    focus = chain[-1] if chain else None
    kids = children(fetch, focus) if focus else []
    decorate(fetch, run_id, chain + kids, best_path)
    return Lineage(candidate_id, chain, kids, best, best_path)


def decorate(fetch: Fetch, run_id: str, nodes: list[LineageNode], best_path: set[int]) -> None:
    """Child counts, the best-path mark and migrations, for nodes about to be shown."""
    counts = child_counts(fetch, [n.id for n in nodes])
    moved = migrations(fetch, run_id)
    for n in nodes:
        n.children = counts.get(n.id, 0)
        n.on_best_path = n.id in best_path
        n.migrated = moved.get(n.id, "")


def lineage_text(fetch: Fetch, run_id: str, candidate_id: int, shown: int = 40) -> Text:
    """The detail tab's view: the chain from the seed, one line per generation (the newest `shown`)."""
    data = lineage(fetch, run_id, candidate_id)
    out = Text()
    if data.best is not None:
        out.append(f"★ on the path from the seed to the best (#{data.best}); L opens the lineage screen\n\n",
                   style="dim")
    hidden = len(data.chain) - shown
    if hidden > 0:
        out.append(f"… {hidden} older ancestors\n", style="dim")
    for node in data.chain[-shown:]:
        out.append("└ ")
        out.append_text(node.label(focus=node.id == data.focus))
        out.append("\n")
    if data.children:
        out.append(f"\nchildren ({data.chain[-1].children if data.chain else len(data.children)})\n",
                   style="bold underline")
        for node in data.children[:20]:
            out.append("  ")
            out.append_text(node.label())
            out.append("\n")
    return out
