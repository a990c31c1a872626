"""Which failures were whose, for `cuco report` (and its --json): the candidates' own failures, and the
environment's faults the run met (retried or paused on, never held against a candidate), by kind."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .faults import CANDIDATE, ENVIRONMENT


def fault_summary(store: Any, run_id: str) -> dict[str, Any]:
    own = store.fetchall(
        "SELECT status, COUNT(*) AS n FROM candidates WHERE run_id=? AND origin_id IS NULL AND "
        "COALESCE(fault, ?) = ? AND status IN ('failed', 'incorrect', 'refused') GROUP BY status",
        (run_id, CANDIDATE, CANDIDATE),
    )
    kinds: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    for r in store.fetchall("SELECT result_json FROM evaluations WHERE run_id=? AND fault=?", (run_id, ENVIRONMENT)):
        try:
            data = json.loads(r["result_json"] or "{}")
        except ValueError:
            data = {}
        kinds[str(data.get("fault") or "unknown")] += 1
        actions[str(data.get("action") or "retry")] += 1
    return {
        "candidate": sum(r["n"] for r in own),
        "candidate_by_status": {r["status"]: r["n"] for r in own},
        "environment": sum(kinds.values()),
        "environment_by_kind": dict(kinds),
        "environment_actions": dict(actions),
    }


def fault_line(faults: dict[str, Any]) -> str:
    """One line for the report's table: '3 the candidates' own; 2 environment faults (no space 2), retried'."""
    own = f"{faults['candidate']} the candidates' own"
    if not faults["environment"]:
        return own + "; no environment fault"
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(faults["environment_by_kind"].items()))
    return f"{own}; {faults['environment']} environment fault(s) ({kinds}), never counted against a candidate"
