"""A run's memory rebuilt from the store when its engine starts again (`Engine.load`): every candidate with its
last verdict, the islands with their migrants, the LLM cost so far and the evaluations since the best. A
candidate that was running is pending again: it is evaluated anew, never counted twice."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..search.islands import IslandModel
from ..search.population import Cand, Population
from ..store.schema import FINAL_STATUSES, PENDING, RUNNING
from ..store.store import Store


@dataclass(frozen=True)
class Restored:
    last_migration_at: int  # the evaluation count at the last migration
    llm_cost: float  # USD spent on model calls so far


def cand_from_row(r: dict[str, Any]) -> Cand:
    return Cand(
        id=r["id"],
        number=r["number"],
        island=r["island"],
        generation=r["generation"],
        status=r["status"],
        source_hash=r["source_hash"],
        descriptor=json.loads(r["descriptor_json"]),
        cell=r["cell"],
        operator=r["operator"],
        fitness=r["fitness"],
        speedup=r["speedup"],
        time_ms=r["time_ms"],
        reason=r["reason"] or "",
        metrics=json.loads(r["metrics_json"]) if r["metrics_json"] else {},
        forked=r["origin_id"] is not None,
        review=r["review"],
        parent_id=r["parent_id"],
    )


async def restore(
    store: Store, run_id: str, population: Population, islands: IslandModel, account: Callable[[Cand], None]
) -> Restored:
    """Load the run's candidates into `population` and `islands` (each one also passed to `account`)."""
    rows = await store.fetchall("SELECT * FROM candidates WHERE run_id=? ORDER BY id", (run_id,))
    marks = await store.fetchall("SELECT candidate_id, verdict, text FROM marks WHERE run_id=? ORDER BY id", (run_id,))
    verdicts = {m["candidate_id"]: (None if m["verdict"] == "clear" else m["verdict"], m["text"] or "") for m in marks}
    for r in rows:
        c = cand_from_row(r)
        c.verdict, text = verdicts.get(c.id, (None, ""))
        if c.verdict == "reject":
            c.reject_reason = text
        if c.status == RUNNING:
            c.status = PENDING
        population.load(c)
        account(c)
        if r["parent_id"] in population.cands:
            population.cands[r["parent_id"]].children += 1
        # generation 0's first member (the seed, or a fork's chosen candidate) starts every island
        for island in range(len(islands)) if c.number == 0 else (c.island,):
            islands.add(island, c.id)
    last_migration_at = 0
    for m in await store.fetchall("SELECT * FROM migrations_log WHERE run_id=? ORDER BY id", (run_id,)):
        islands.add(m["dst_island"], m["candidate_id"])
        islands.islands[m["dst_island"]].last_migration = m["at_evaluation"]
        last_migration_at = max(last_migration_at, m["at_evaluation"])
    cost = await store.fetchone("SELECT COALESCE(SUM(cost_usd), 0) AS c FROM llm_calls WHERE run_id=?", (run_id,))
    return Restored(last_migration_at, float(cost["c"]) if cost else 0.0)


def evaluations_since_best(cands: Iterable[Cand], best: Cand | None) -> int:
    """Patience counts evaluations since the best, in the order they finished."""
    if best is None:
        return 0
    return sum(1 for c in cands if c.status in FINAL_STATUSES and not c.forked and c.id > best.id)
