"""The rows a result writes beside its candidate row, in the ledger's one transaction: the fault marks of a
verdict, an environment fault's stage, and the candidate's timelines. Statements and parameters only; the ledger
(engine/run/ledger.py) runs them."""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

from ..evaluation import faults
from ..evaluation.evaluation import EvalOutcome
from ..evaluation.fault_policy import Decision
from ..store.blobs import BlobStore
from ..timeline.timeline import MAX_RAW_BYTES


def verdict_rows(candidate_id: int, outcome: EvalOutcome) -> list[tuple[str, tuple]]:
    """With a recorded verdict: a failure of the candidate's is marked so, on it and its failed stage."""
    if outcome.status == "done":
        return []
    return [
        ("UPDATE candidates SET fault=? WHERE id=?", (faults.CANDIDATE, candidate_id)),
        (
            "UPDATE evaluations SET fault=? WHERE candidate_id=? AND status!='ok' AND fault IS NULL",
            (faults.CANDIDATE, candidate_id),
        ),
    ]


def environment_rows(
    run_id: str, candidate_id: int, outcome: EvalOutcome, decision: Decision, blobs: BlobStore
) -> list[tuple[str, tuple]]:
    """The stage that met an environment fault, kept for the report (fault='environment'; it is not a
    verdict on the candidate: the stages that pass are recorded once, with the verdict)."""
    rec = outcome.stages[-1] if outcome.stages else None
    try:
        log_hash = blobs.put_text(rec.log) if rec is not None and rec.log else None
    except OSError:  # the disk that is full is often this one
        log_hash = None
    now = time.time()
    stage = rec.stage if rec is not None else "evaluation"
    return [
        (
            "INSERT INTO evaluations (candidate_id, run_id, stage, status, rc, duration_s, node, attempt, "
            "log_hash, result_json, created_at, fault) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                candidate_id,
                run_id,
                stage,
                rec.status if rec else "error",
                rec.rc if rec else None,
                rec.duration_s if rec else 0.0,
                rec.node if rec else "",
                rec.attempt if rec else 1,
                log_hash,
                json.dumps({"fault": decision.fault.kind, "reason": decision.fault.reason, "action": decision.action}),
                now,
                faults.ENVIRONMENT,
            ),
        )
    ]


def timeline_rows(
    candidate_id: int, raws: dict[str, dict[str, Any]], figs: dict[str, dict[str, Any]]
) -> list[tuple[str, tuple]]:
    """The statements that keep a candidate's timelines with its result (a blob per config, in the store)."""
    rows = []
    for config, raw in raws.items():
        data = zlib.compress(json.dumps(raw, separators=(",", ":")).encode(), 6)
        if len(data) > MAX_RAW_BYTES:
            data = zlib.compress(json.dumps({"error": f"records too large to keep ({len(data)} bytes)"}).encode())
        rows.append(
            (
                "INSERT OR REPLACE INTO timelines (candidate_id, config, figures_json, data) VALUES (?,?,?,?)",
                (candidate_id, config, json.dumps(figs.get(config) or {}, sort_keys=True), data),
            )
        )
    return rows
