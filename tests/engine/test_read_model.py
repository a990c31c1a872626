"""The read model (engine/views): one run summary for the TUI's header and `cuco report`, counted the
same way, on a real store with every kind of verdict, a fork's copies, a held result and a rejected best."""

from __future__ import annotations

import json
import time
from pathlib import Path

from engine.contract import BestRef, RunSummary
from engine.store.store import ReadStore, Store
from engine.views.read_model import ReadModel
from engine.views.report import build_report

STATUSES = [
    ("done", 1.5),
    ("done", 2.0),
    ("done", 3.0),
    ("incorrect", None),
    ("failed", None),
    ("refused", None),
    ("pending", None),
    ("running", None),
]


async def _fill(home: Path) -> None:
    store = await Store(home).open()
    try:
        async with store.transaction() as tx:
            now = time.time()
            await tx.execute(
                "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, "
                "updated_at, baseline_time_ms) VALUES (?,?,?,?,?,?,?,?)",
                ("r1", "demo", "/x", "stopped", "{}", now, now, 12.0),
            )
            for n, (status, speedup) in enumerate(STATUSES):
                metrics = (
                    {
                        "benchmark": {
                            "configs": [
                                {"name": "small", "speedup": speedup, "baseline_ms": 4.0, "candidate_ms": 4.0 / speedup}
                            ]
                        }
                    }
                    if speedup
                    else None
                )
                await tx.execute(
                    "INSERT INTO candidates (id, run_id, number, island, generation, operator, mutator, "
                    "source_hash, descriptor_json, cell, status, correct, speedup, time_ms, baseline_ms, fitness, "
                    "metrics_json, review, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        n + 1,
                        "r1",
                        n,
                        0,
                        0,
                        "knob",
                        "design-space",
                        f"h{n}",
                        "{}",
                        "c",
                        status,
                        1 if speedup else 0,
                        speedup,
                        8.0 / speedup if speedup else None,
                        8.0 if speedup else None,
                        speedup,
                        json.dumps(metrics) if metrics else None,
                        "needs_review" if n == 2 else None,
                        now,
                    ),
                )
            # a fork's copy of a candidate of its parent: evaluated there, not here
            await tx.execute(
                "INSERT INTO candidates (id, run_id, number, island, generation, operator, mutator, source_hash, "
                "descriptor_json, cell, status, speedup, fitness, origin_id, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (50, "r1", 50, 0, 0, "fork", "fork", "h50", "{}", "c", "done", 1.1, 1.1, 999, now),
            )
            # the fastest counting one (#2, 2.0x) is rejected by a person: the best is #1
            await tx.execute(
                "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
                ("r1", 2, "reject", "reads out of bounds", now),
            )
    finally:
        await store.close()


async def test_the_header_and_the_report_count_alike(tmp_path: Path):
    await _fill(tmp_path)
    view = ReadModel(tmp_path)
    store = ReadStore(tmp_path)
    try:
        summary = view.summary("r1")
        report = build_report(store, "r1")
    finally:
        view.close()
        store.close()
    assert isinstance(summary, RunSummary)
    assert (
        summary.evaluated,
        summary.correct,
        summary.incorrect,
        summary.failed,
        summary.pending,
        summary.refused,
    ) == (6, 3, 1, 2, 2, 1)
    assert summary.best == BestRef(1, 1.5, 8.0 / 1.5)  # not the rejected #2, not #3 held for review
    assert summary.needs_review == (3,)
    assert {k: report[k] for k in ("evaluated", "correct", "incorrect", "failed", "pending", "state")} == {
        "evaluated": summary.evaluated,
        "correct": summary.correct,
        "incorrect": summary.incorrect,
        "failed": summary.failed - summary.incorrect,  # the report's counts are disjoint; the header's "bad" is both
        "pending": summary.pending,
        "state": summary.state,
    }
    assert report["correct"] + report["incorrect"] + report["failed"] + report["refused_count"] == report["evaluated"]
    assert report["best"]["candidate"] == summary.best.candidate
    assert report["best"]["configs"][0]["name"] == "small" and report["best"]["configs"][0]["speedup"] == 1.5


async def test_a_candidates_per_config_results_come_typed(tmp_path: Path):
    await _fill(tmp_path)
    view = ReadModel(tmp_path)
    try:
        (small,) = view.config_results(3)
        assert (small.name, small.speedup, small.baseline_ms, small.candidate_ms) == ("small", 3.0, 4.0, 4.0 / 3)
        assert view.config_results(4) == []  # incorrect: no benchmark ran
    finally:
        view.close()
