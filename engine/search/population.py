"""A run's candidates in memory: every one by id, the eligible and the rejected, the MAP-Elites archive and
the best, kept consistent by one rule.

A candidate counts (engine/store/counting.py: evaluated correct, not rejected, not waiting for review) or it does
not. `admit` is the one way in: eligible, then offered to its archive cell, then compared with the best.
`withdraw` is the one way out (a rejection): its cell goes to the cell's next-best eligible candidate and
the best to the best one left. Nothing here writes to the store: the ledger writes what this decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..store import counting
from ..store.schema import FAILED, INCORRECT, REFUSED
from .archive import Archive


@dataclass
class Cand:
    """The engine's in-memory view of a candidate (rebuilt from the store)."""

    id: int
    number: int
    island: int
    generation: int
    status: str
    source_hash: str
    descriptor: dict[str, str]
    cell: str
    operator: str
    fitness: float | None = None
    speedup: float | None = None
    time_ms: float | None = None
    reason: str = ""
    verdict: str | None = None
    reject_reason: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    children: int = 0
    forked: bool = False
    review: str | None = None
    parent_id: int | None = None

    @property
    def eligible(self) -> bool:
        """May be the best, a parent or an inspiration (engine/store/counting.py decides)."""
        return counting.counts(self.status, self.fitness, self.verdict, self.review)


def fitness(c: Cand) -> float:
    return c.fitness or 0.0


FAILED_STATUSES = (FAILED, INCORRECT, REFUSED)
SHOWN_FAILURES = 3  # failures in one mutation prompt


def recent_failures(
    cands: Iterable[Cand], island: int, limit: int = SHOWN_FAILURES, *, exclude: Callable[[Cand], bool] | None = None
) -> list[Cand]:
    """Failed, incorrect or refused children of this run (not fork copies), the island's newest first,
    then the other islands' newest; at most `limit`."""
    failed = [c for c in cands if c.status in FAILED_STATUSES and not c.forked and c.number > 0]
    if exclude is not None:
        failed = [c for c in failed if not exclude(c)]
    failed.sort(key=lambda c: (c.island != island, -c.id))
    return failed[:limit]


@dataclass(frozen=True)
class Admission:
    """What admitting a candidate changed (the ledger writes a row and an event for each)."""

    eligible: bool = False
    archived: bool = False  # it is now its cell's elite
    best: bool = False  # it is now the run's best


class Population:
    def __init__(self) -> None:
        self.cands: dict[int, Cand] = {}
        self.by_hash: set[str] = set()  # every source ever proposed: never evaluated twice
        self.eligible: dict[int, Cand] = {}
        self.rejected: dict[int, Cand] = {}  # kept up to date, so a proposal never scans every candidate
        self.archive = Archive()
        self.best: Cand | None = None
        self._cells: dict[str, dict[int, Cand]] = {}  # cell -> its eligible candidates

    def add(self, c: Cand) -> None:
        """A new candidate (proposed, or loaded from the store)."""
        self.cands[c.id] = c
        self.by_hash.add(c.source_hash)

    def load(self, c: Cand) -> None:
        """A candidate read back from the store, its verdict included."""
        self.add(c)
        if c.verdict == "reject":
            self.rejected[c.id] = c
        self.admit(c)

    def admit(self, c: Cand) -> Admission:
        """If `c` counts: eligible, offered to its archive cell, compared with the best."""
        if not c.eligible:
            return Admission()
        self.eligible[c.id] = c
        self._cells.setdefault(c.cell, {})[c.id] = c
        archived = self.archive.offer(c.cell, c.id, fitness(c))
        best = self.best is None or fitness(c) > fitness(self.best)
        if best:
            self.best = c
        return Admission(eligible=True, archived=archived, best=best)

    def accept(self, c: Cand) -> Admission:
        """The user accepted `c` (a flagged candidate out of review, or a rejection taken back)."""
        c.verdict = "accept"
        self.rejected.pop(c.id, None)
        return self.admit(c)

    def reject(self, c: Cand, reason: str) -> None:
        """The user rejected `c`: it stops counting."""
        c.verdict, c.reject_reason = "reject", reason
        self.rejected[c.id] = c
        self.withdraw(c)

    def withdraw(self, c: Cand) -> None:
        """`c` no longer counts: its cell goes to the cell's next-best, the best to the best one left."""
        self.eligible.pop(c.id, None)
        cell = self._cells.get(c.cell, {})
        cell.pop(c.id, None)
        if self.archive.remove(c.id) is not None:
            for other in sorted(cell.values(), key=lambda x: x.id):
                self.archive.offer(other.cell, other.id, fitness(other))
        if self.best is c:
            self.best = max(self.eligible.values(), key=fitness, default=None)
