"""The demo on a busy machine: beside two bursty neighbours (a CPU spinner and a memory copier, busy and idle
by turns for tenths of a second: tests/bench/hogs.py), a 20-evaluation run evaluates all 20, ends with a best
whose numbers were re-measured side by side with the seed (the leaders twice, six jobs pooled), and holds nothing for review; the best's number
carries its interval. tests/bench/bench_noisy_search.py runs ten of these, re-times every candidate and
counts the seed's intervals that hold 1.00 (docs/PERFORMANCE.md)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from hogs import bursty_hogs  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

CLI = [sys.executable, "-m", "cuco_tui.cli"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_twenty_evaluations_beside_bursty_hogs_end_with_a_re_measured_best(tmp_path):
    home = tmp_path / "home"
    with bursty_hogs(seed=7):
        run = subprocess.run(
            CLI + ["--home", str(home), "run", "demo", "--headless", "--max-evals", "20", "--name", "busy"],
            capture_output=True,
            text=True,
            timeout=800,
        )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(
        subprocess.run(
            CLI + ["--home", str(home), "report", "busy", "--json"], capture_output=True, text=True, timeout=120
        ).stdout
    )
    assert report["state"] == "finished" and report["stop_reason"] == "reached 20 evaluations"
    assert report["evaluated"] == 20 and report["correct"] == 20
    assert report["needs_review"] == []
    best = report["best"]
    assert best is not None and best["remeasured"] is True
    low, high = best["speedup_interval"]
    assert low <= best["speedup"] <= high
    con = sqlite3.connect(home / "cuco.db")
    seed_low, seed_high, remeasured = con.execute(
        "SELECT speedup_low, speedup_high, remeasured FROM candidates WHERE number=0"
    ).fetchone()
    assert remeasured == 1 and seed_low <= seed_high  # side by side with the finalists (1.00 inside: the bench)
    assert best["candidate"] in report["remeasured"]
    # the leaders measured side by side a second time, their jobs pooled: the best's number is six jobs'
    jobs = json.loads(
        con.execute("SELECT metrics_json FROM candidates WHERE id=?", (best["candidate"],)).fetchone()[0]
    )["remeasured"]["jobs"]
    assert jobs == 6, jobs
    text = subprocess.run(
        CLI + ["--home", str(home), "report", "busy"], capture_output=True, text=True, timeout=120
    ).stdout
    assert f"[{low:.2f}-{high:.2f}]" in text and "re-measured side by side" in text
