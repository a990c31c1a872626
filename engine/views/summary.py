"""A run's summary from the store: the one computation behind the TUI's header, `cuco report` and `cuco serve`
(a live engine's `status()` says the same from memory)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..contract import BestRef, RunSummary, interval_of
from ..store.counting import NEEDS_REVIEW
from ..store.schema import DONE, FAILED, FINAL_STATUSES, INCORRECT, REFUSED
from . import liveness
from .best import best_candidate

Fetch = Callable[[str, Any], list[dict[str, Any]]]
REVIEW_SHOWN = 50  # ids held for a person the summary lists (newest first): enough for the toasts


def _one(fetch: Fetch, sql: str, params: tuple = ()) -> dict[str, Any] | None:
    rows = fetch(sql, params)
    return rows[0] if rows else None


def run_summary(fetch: Fetch, home: Path, run_id: str) -> RunSummary | None:
    """The run's counts, best, spend and state as a viewer shows them (None: no such run). A dead engine's
    `running` row reads `died` (engine/views/liveness.py)."""
    run = _one(fetch, "SELECT * FROM runs WHERE id=?", (run_id,))
    if run is None:
        return None
    # A fork's copies of its parent's candidates (origin_id) were evaluated in the parent run, not here.
    counts = {
        r["status"]: r["n"]
        for r in fetch(
            "SELECT status, COUNT(*) AS n FROM candidates WHERE run_id=? AND origin_id IS NULL GROUP BY status",
            (run_id,),
        )
    }
    best = best_candidate(fetch, run_id, "c.id, c.speedup, c.time_ms, c.speedup_low, c.speedup_high, c.remeasured")
    cost = _one(fetch, "SELECT COALESCE(SUM(cost_usd), 0) AS c FROM llm_calls WHERE run_id=?", (run_id,)) or {}
    review = fetch(
        "SELECT id FROM candidates WHERE run_id=? AND status=? AND review=? ORDER BY id DESC LIMIT ?",
        (run_id, DONE, NEEDS_REVIEW, REVIEW_SHOWN),
    )
    state = liveness.shown_state(home, run)
    return RunSummary(
        run=run_id,
        workload=run["workload"],
        state=state,
        stop_reason=liveness.died_reason(run_id) if state == liveness.DIED else run["stop_reason"],
        parent_run=run["parent_run"],
        fork_candidate=run["fork_candidate"],
        evaluated=sum(n for s, n in counts.items() if s in FINAL_STATUSES),
        correct=counts.get(DONE, 0),
        incorrect=counts.get(INCORRECT, 0),
        failed=counts.get(FAILED, 0) + counts.get(INCORRECT, 0),
        pending=sum(n for s, n in counts.items() if s not in FINAL_STATUSES),
        refused=counts.get(REFUSED, 0),
        best=BestRef(
            best["id"],
            best["speedup"],
            best["time_ms"],
            interval_of([best["speedup_low"], best["speedup_high"]]),
            bool(best["remeasured"]),
        )
        if best
        else None,
        baseline_time_ms=run["baseline_time_ms"],
        llm_cost_usd=float(cost.get("c") or 0.0),
        elapsed_s=run["elapsed_s"] or 0.0,
        needs_review=tuple(r["id"] for r in review),
        nodes=tuple(nodes(fetch)),
    )


def nodes(fetch: Fetch) -> list[dict[str, Any]]:
    """The home's node states as the engine last wrote them (a live engine's status reply is newer)."""
    out = []
    for row in fetch("SELECT name, state_json, updated_at FROM nodes ORDER BY name", ()):
        try:
            state = json.loads(row["state_json"])
        except ValueError:
            state = {}
        state.setdefault("name", row["name"])
        state["updated_at"] = row["updated_at"]
        out.append(state)
    return out
