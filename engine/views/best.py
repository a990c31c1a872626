"""The run's best and its ranking: one definition for every reader (report, TUI header, islands, lineage,
runs list, `cuco serve`), so that no screen names a rejected or held candidate as the best.

A candidate ranks when it counts (engine/store/counting.py: correct, measured, not rejected, not waiting for a
person's review); candidates rank by fitness, which is the speedup (the geometric mean over the problem
configs of the harness's per-config A B A B ratio), ties going to the older one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..store.counting import COUNTS_SQL

# `c` is the candidates table; the order uses candidates_run_fitness.
RANK_ORDER_SQL = "c.fitness DESC, c.id ASC"

Fetch = Callable[[str, Any], list[dict[str, Any]]]


def top_candidates(
    fetchall: Fetch, run_id: str, limit: int, columns: str = "c.*", where: str = "1=1", params: tuple = ()
) -> list[dict[str, Any]]:
    """The run's ranking, best first: only candidates that count."""
    return fetchall(
        f"SELECT {columns} FROM candidates c WHERE c.run_id=? AND {COUNTS_SQL} AND {where} "
        f"ORDER BY {RANK_ORDER_SQL} LIMIT ?",
        (run_id, *params, limit),
    )


def best_candidate(fetchall: Fetch, run_id: str, columns: str = "c.*") -> dict[str, Any] | None:
    """The run's best (None: no candidate counts yet)."""
    rows = top_candidates(fetchall, run_id, 1, columns)
    return rows[0] if rows else None


def island_bests(fetchall: Fetch, run_id: str, islands: list[int]) -> dict[int, float | None]:
    """Each island's best speedup, by the same rule: one walk down candidates_run_fitness per island, which
    stops at the island's first candidate that counts (a GROUP BY would read the whole run)."""
    out: dict[int, float | None] = {}
    for island in islands:
        rows = top_candidates(fetchall, run_id, 1, "c.speedup", "c.island=?", (island,))
        out[island] = rows[0]["speedup"] if rows else None
    return out
