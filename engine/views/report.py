"""`cuco report`: a run's summary, computed from the store only (never from memory)."""

from __future__ import annotations

import json
from typing import Any

from ..contract import ConfigResult, config_results, configs_from_benchmark, timeline_figures
from ..evaluation.efficiency import judge
from ..evaluation.fault_report import fault_summary
from ..llm import strategies as strat
from ..store.counting import COUNTS_SQL, NEEDS_REVIEW
from ..store.schema import REFUSED
from ..store.store import ReadStore
from .summary import run_summary


def _config_row(c: ConfigResult, timeline_figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config's numbers and its efficiency verdict (engine/evaluation/efficiency.py): an overlap efficiency, or
    "compute changed" with the candidate's own compute time where it beat every overlap of the baseline."""
    row = c.as_dict()
    verdict = judge(row, timeline_figures)
    row.update(verdict.as_dict())
    row["efficiency_label"] = verdict.label()
    return row


def _metrics(metrics_json: str | None) -> dict[str, Any]:
    try:
        metrics = json.loads(metrics_json) if metrics_json else {}
    except ValueError:
        return {}
    return metrics if isinstance(metrics, dict) else {}


def best_per_config(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """For each benchmark config, the correct, not rejected candidate with the highest A B ratio there: the
    best single design point can differ from config to config (a small, latency-bound shape often wants
    another design than a large one)."""
    best: dict[str, dict[str, Any]] = {}
    for r in store.fetchall(
        f"SELECT c.id, c.descriptor_json, c.metrics_json FROM candidates c WHERE c.run_id=? "
        f"AND {COUNTS_SQL} ORDER BY c.id",
        (run_id,),
    ):
        metrics = _metrics(r["metrics_json"])
        for c in config_results(metrics) if configs_from_benchmark(metrics) else ():
            if c.speedup is None:
                continue
            held = best.get(c.name)
            if held is None or c.speedup > held["speedup"]:
                best[c.name] = {
                    "candidate": r["id"],
                    "descriptor": json.loads(r["descriptor_json"]),
                    **_config_row(c, timeline_figures(metrics, c.name)),
                }
    return list(best.values())


def measurement_counts(store: ReadStore, run_id: str) -> dict[str, Any]:
    """Benchmarks taken again because the node was busy when they ran, and the candidates whose numbers are a
    side-by-side re-measurement's."""
    row = store.fetchone(
        "SELECT COALESCE(SUM(json_extract(metrics_json, '$.interference_repeats')), 0) AS repeats "
        "FROM candidates WHERE run_id=? AND origin_id IS NULL",
        (run_id,),
    )
    remeasured = store.fetchall(
        "SELECT id FROM candidates WHERE run_id=? AND remeasured=1 ORDER BY id",
        (run_id,),
    )
    return {
        "interference_repeats": int(row["repeats"]) if row else 0,
        "remeasured": [r["id"] for r in remeasured],
    }


def needs_review(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """Verified results that wait for a person (faster than the overlap bound, or flagged otherwise): they
    are not the best, a parent or an inspiration until accepted (engine/store/counting.py)."""
    out = []
    for r in store.fetchall(
        "SELECT id, speedup, time_ms, metrics_json FROM candidates WHERE run_id=? AND review=? ORDER BY id",
        (run_id, NEEDS_REVIEW),
    ):
        metrics = json.loads(r["metrics_json"]) if r["metrics_json"] else {}
        out.append(
            {
                "candidate": r["id"],
                "speedup": r["speedup"],
                "time_ms": r["time_ms"],
                "flags": metrics.get("flags") or [],
                "measurements": metrics.get("measurements"),
            }
        )
    return out


def strategies(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """The run's mutation strategies (LLM runs): text, status, pinned, prompts, children, successes, failures,
    mean gain, with the operator's marks folded in."""
    row = store.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key=?", (run_id, strat.STATE_KEY))
    marks = store.fetchall(
        "SELECT id, verdict, strategy, text FROM strategy_marks WHERE run_id=? ORDER BY id", (run_id,)
    )
    pop = strat.effective(row["value_json"] if row else None, marks)
    return pop.rows() if pop is not None else []


def build_report(store: ReadStore, run_id: str) -> dict[str, Any]:
    summary = run_summary(store.fetchall, store.home, run_id)
    run = store.run(run_id)
    if summary is None or run is None:
        raise KeyError(run_id)
    best = store.candidate(summary.best.candidate) if summary.best is not None else None
    marks = store.fetchall(
        "SELECT m.candidate_id, m.verdict, m.text FROM marks m WHERE m.run_id=? AND m.id = "
        "(SELECT MAX(id) FROM marks m2 WHERE m2.candidate_id=m.candidate_id)",
        (run_id,),
    )
    cost = store.fetchone(
        "SELECT COALESCE(SUM(cost_usd), 0) AS usd, COUNT(*) AS calls, "
        "COALESCE(SUM(input_tokens), 0) AS tin, COALESCE(SUM(output_tokens), 0) AS tout "
        "FROM llm_calls WHERE run_id=?",
        (run_id,),
    )
    best_obj = None
    if best is not None:
        metrics = json.loads(best["metrics_json"]) if best["metrics_json"] else {}
        best_obj = {
            "candidate": best["id"],
            "speedup": best["speedup"],
            "time_ms": best["time_ms"],
            "baseline_ms": best["baseline_ms"],
            "operator": best["operator"],
            # baseline sum / candidate sum of the best's own job: not the speedup (a geometric mean of
            # per-config ratios), and not the run's baseline (measured in the seed's job)
            "sum_ratio": (
                round(best["baseline_ms"] / best["time_ms"], 4) if best["baseline_ms"] and best["time_ms"] else None
            ),
            "descriptor": json.loads(best["descriptor_json"]),
            "measurements": metrics.get("measurements"),
            "speedup_interval": metrics.get("speedup_interval"),
            # the numbers of a side-by-side re-measurement of the finalists (and what the search had read)
            "remeasured": bool(metrics.get("remeasured")),
            "search": metrics.get("search"),
            "flags": metrics.get("flags") or [],
            "configs": [
                _config_row(c, timeline_figures(metrics, c.name))
                for c in config_results(metrics)
                if configs_from_benchmark(metrics)
            ],
        }
    return {
        "run": run_id,
        "workload": summary.workload,
        "state": summary.state,
        "stop_reason": summary.stop_reason,
        "parent_run": summary.parent_run,
        "fork_candidate": summary.fork_candidate,
        "evaluated": summary.evaluated,
        "correct": summary.correct,
        "incorrect": summary.incorrect,
        # disjoint: correct + incorrect + failed + refused_count == evaluated (the summary's `failed`, for
        # the header, also counts the incorrect ones)
        "failed": summary.failed - summary.incorrect,
        "refused_count": summary.refused,
        "pending": summary.pending,
        "baseline_time_ms": summary.baseline_time_ms,
        "best": best_obj,
        "best_per_config": best_per_config(store, run_id),
        "faults": fault_summary(store, run_id),  # which failures were whose
        "needs_review": needs_review(store, run_id),
        **measurement_counts(store, run_id),
        "refused": [
            {"candidate": r["id"], "reason": r["reason"]}
            for r in store.fetchall(
                "SELECT id, reason FROM candidates WHERE run_id=? AND status=? AND origin_id IS NULL ORDER BY id",
                (run_id, REFUSED),
            )
        ],
        "accepted": [m["candidate_id"] for m in marks if m["verdict"] == "accept"],
        "rejected": [{"candidate": m["candidate_id"], "reason": m["text"]} for m in marks if m["verdict"] == "reject"],
        "llm_cost_usd": round(float(cost["usd"]), 6) if cost else 0.0,
        "llm_calls": cost["calls"] if cost else 0,
        "llm_tokens": {"input": cost["tin"], "output": cost["tout"]} if cost else {"input": 0, "output": 0},
        "strategies": strategies(store, run_id),
        "elapsed_s": run["elapsed_s"],
        "config": json.loads(run["config_json"]),
    }
