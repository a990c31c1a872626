"""tests/bench/bench_eval_rate.py reads evaluations per minute, and where a run's time went, from the store a
real engine run wrote (the synthetic executor stands in for the GPUs, with known job durations)."""

from __future__ import annotations

import asyncio
import importlib.util
import sqlite3
from pathlib import Path

import pytest

from engine.config import RunConfig
from engine.run.engine import Engine
from engine.workload import load_workload
from tests.engine.synthetic import SyntheticExecutor

BENCH = Path(__file__).resolve().parent / "bench" / "bench_eval_rate.py"
_spec = importlib.util.spec_from_file_location("bench_eval_rate", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _run(home: Path) -> None:
    async def go():
        ex = SyntheticExecutor(slots=1, durations={"build": 0.05, "verify": 0.1, "benchmark": 0.15})
        engine = await Engine.create(
            home,
            load_workload("demo"),
            RunConfig(max_evals=6, concurrency=1, reverify_best=False),
            run_id="r1",
            executor=ex,
        )
        assert await engine.run() == "finished"
        await engine.close()

    asyncio.run(go())


def test_rate_and_stage_times_come_from_the_store(tmp_path, capsys):
    _run(tmp_path)
    db = tmp_path / "cuco.db"
    con = sqlite3.connect(db)
    a = bench.analyse(con, "r1")
    evaluated, elapsed = (
        con.execute(
            "SELECT COUNT(*) FROM candidates WHERE status IN ('done','incorrect','failed','refused')"
        ).fetchone()[0],
        con.execute("SELECT elapsed_s FROM runs").fetchone()[0],
    )
    gpu_total = con.execute(
        "SELECT SUM(duration_s) FROM evaluations WHERE stage IN ('verify','benchmark','benchmark2')"
    ).fetchone()[0]
    con.close()
    assert a["evaluated"] == evaluated >= 6
    assert a["evals_per_min"] == pytest.approx(evaluated / (elapsed / 60.0), rel=0.01)
    # every verified candidate is benchmarked; the finalists and would-be bests are benchmarked again
    assert a["stages"]["benchmark"]["n"] >= a["stages"]["verify"]["n"] >= 6
    assert a["stages"]["benchmark"]["mean_s"] == pytest.approx(0.15, abs=0.05)
    # one slot: the GPU jobs ran one after another, so their union is their sum
    assert a["gpu_busy_s"] == pytest.approx(gpu_total, abs=0.15)
    assert a["gpu_busy_s"] <= a["elapsed_s"]
    # a slow rate fails the target, a fast one passes; a missing store is bad input
    assert bench.main([str(db), "--min-rate", "1e9"]) == 1
    assert bench.main([str(db), "--min-rate", "1"]) == 0
    assert "evaluations in" in capsys.readouterr().out
    assert bench.main([str(tmp_path / "nope.db")]) == 2
