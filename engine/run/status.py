"""A live run's status as the daemon answers `status`: counts, the best, cost, time, nodes and islands."""

from __future__ import annotations

from typing import Any

from remote.jobs import Executor

from ..contract import BestRef, interval_of
from ..search.islands import IslandModel
from ..search.population import Cand
from ..store.schema import DONE, FAILED, FINAL_STATUSES, INCORRECT


def run_status(
    run_id: str,
    workload: str,
    state: str,
    cands: dict[int, Cand],
    best: Cand | None,
    in_flight: int,
    llm_cost: float,
    elapsed_s: float,
    executor: Executor,
    islands: IslandModel,
) -> dict[str, Any]:
    finals = [c for c in cands.values() if c.status in FINAL_STATUSES and not c.forked]
    return {
        "run": run_id,
        "workload": workload,
        "state": state,
        "evaluated": len(finals),
        "correct": sum(c.status == DONE for c in finals),
        "failed": sum(c.status in (FAILED, INCORRECT) for c in finals),
        "in_flight": in_flight,
        "best": None
        if best is None
        else BestRef(
            best.id,
            best.speedup,
            best.time_ms,
            interval_of(best.metrics.get("speedup_interval")),
            bool(best.metrics.get("remeasured")),
        ).as_dict(),
        "llm_cost_usd": llm_cost,
        "elapsed_s": elapsed_s,
        "nodes": [vars(n) for n in executor.nodes()],
        "islands": [
            {
                "index": i.index,
                "size": len(i.members),
                "last_migration": i.last_migration,
                "best": max(
                    (cands[m].fitness or 0 for m in i.members if m in cands and cands[m].eligible),
                    default=None,
                ),
            }
            for i in islands.islands
        ],
    }
