"""The demo for real, through the command line a user types: run, report --json, ls, export, accept,
reject (offline, through the store), and the report contract of docs/contract.md."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.evaluation.harness_result import BOUND_MARGIN

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

CLI = [sys.executable, "-m", "cuco_tui.cli"]
DEMO = Path(__file__).resolve().parents[2] / "workloads" / "demo"
REPORT_FIELDS = {
    "run",
    "workload",
    "state",
    "parent_run",
    "evaluated",
    "correct",
    "failed",
    "baseline_time_ms",
    "best",
    "accepted",
    "rejected",
    "llm_cost_usd",
}


def cuco(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(CLI + ["--home", str(home), *args], capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"cuco {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def test_frozen_seed_copy_matches_the_shipped_seed():
    # The baseline is the seed's own translation unit (baseline.cpp includes seed_copy.inc): if they
    # drifted apart, the seed would no longer measure 1.0x against the baseline.
    assert (DEMO / "seed_copy.inc").read_text() == (DEMO / "candidate.cpp").read_text()


def test_demo_run_report_export_and_marks(tmp_path):
    home = tmp_path / "home"
    summary = cuco(home, "run", "demo", "--headless", "--max-evals", "6", "--name", "d1").stdout  # the display's stream
    assert "per config" in summary and "eff" in summary  # the end-of-run table: overlap efficiency per config
    assert "(same)" in summary and "differs from #1" in summary  # design points as changes from the seed
    report = json.loads(cuco(home, "report", "d1", "--json").stdout)
    assert REPORT_FIELDS <= set(report)
    assert report["run"] == "d1" and report["workload"] == "demo" and report["state"] == "finished"
    assert report["parent_run"] is None and report["llm_cost_usd"] == 0
    assert report["evaluated"] == 6 and report["correct"] + report["failed"] == 6
    assert report["baseline_time_ms"] > 0
    best = report["best"]
    assert best["candidate"] and best["speedup"] > 0 and best["time_ms"] > 0
    assert len(best["configs"]) == 2 and all(c["bound"] >= 1.0 for c in best["configs"])
    for c in best["configs"]:  # the harness's own numbers, combined as documented (docs/engine.md, "Per config")
        bound = max(c["comp_ms"], c["comm_ms"])
        if c["baseline_ms"] <= bound:  # the bound measured no shorter than the whole: no usable bound
            assert c["efficiency"] is None and c["efficiency_kind"] is None
        elif c["candidate_ms"] < (1.0 - BOUND_MARGIN) * bound:  # beat every overlap of the seed's work
            assert c["efficiency"] is None and c["efficiency_kind"] == "compute changed"
        else:  # within the margin under the bound it is at the bound: 1.00, never more
            saved = (c["baseline_ms"] - c["candidate_ms"]) / (c["baseline_ms"] - bound)
            assert c["efficiency_kind"] == "overlap"
            assert c["efficiency"] == pytest.approx(min(saved, 1.0), abs=1e-3)
    assert {c["name"] for c in report["best_per_config"]} == {c["name"] for c in best["configs"]}

    listing = cuco(home, "ls").stdout
    assert "d1" in listing and "demo" in listing

    out = tmp_path / "best.cpp"
    cuco(home, "export", "d1", "-o", str(out))
    text = out.read_text()
    assert "EVOLVE-BLOCK-START" in text and "cuco_run" in text

    # No engine is running: marks go straight to the store.
    cuco(home, "accept", "d1", str(best["candidate"]), "--note", "fast and clean")
    other = "1" if best["candidate"] != 1 else "2"  # the seed, unless it is the best (6 evaluations can leave it so)
    refused = cuco(home, "reject", "d1", other, "--reason", "", check=False)
    assert refused.returncode == 2 and "reason" in refused.stderr
    cuco(home, "reject", "d1", other, "--reason", "nothing to keep")
    report = json.loads(cuco(home, "report", "d1", "--json").stdout)
    assert report["accepted"] == [best["candidate"]]
    assert report["rejected"] == [{"candidate": int(other), "reason": "nothing to keep"}]
    # export with no --candidate writes the accepted one
    exported = cuco(home, "export", "d1", "-o", "-").stdout
    assert "EVOLVE-BLOCK-START" in exported


def test_bad_run_arguments_exit_2_with_the_field(tmp_path):
    proc = cuco(tmp_path / "h", "run", "demo", "--headless", "--islands", "0", check=False)
    assert proc.returncode == 2 and "islands" in proc.stderr
    proc = cuco(tmp_path / "h", "run", "no-such-workload", "--headless", check=False)
    assert proc.returncode == 2 and "WORKLOAD" in proc.stderr and "demo" in proc.stderr
    proc = cuco(tmp_path / "h", "report", "nothing", check=False)
    assert proc.returncode == 2
