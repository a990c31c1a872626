"""`cuco profile CANDIDATE`: the checks a user meets before anything runs (a CPU workload has no kernels to
count; without Nsight Compute on the machine, a clear message, not a traceback), and the per-kernel summary
read from ncu's raw CSV page as recorded on an H100 (tests/gpu/data/ncu_raw_page.csv: gemm_allgather's
lsa_fused at one rank, config small_m1k, verify mode, 2026-11-24)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cuco_tui.verbs.profile import NCU_METRICS, summarize_ncu_csv

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tui"))

from storefill import fill_store  # noqa: E402

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def cuco(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        CLI + ["--home", str(home), *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


@pytest.fixture
def home(tmp_path) -> Path:
    fill_store(tmp_path / "h", run_id="r1", n=3)
    return tmp_path / "h"


def test_a_cpu_workload_is_refused_with_what_to_use_instead(home):
    proc = cuco(home, "profile", "2")
    assert proc.returncode == 2, proc.stderr
    assert "demo" in proc.stderr and "needs a CUDA workload" in proc.stderr and "--timeline" in proc.stderr


def test_unknown_candidate_and_config_name_the_field(home):
    proc = cuco(home, "profile", "77")
    assert proc.returncode == 2 and "CANDIDATE" in proc.stderr and "no candidate 77" in proc.stderr
    db = sqlite3.connect(home / "cuco.db")
    db.execute(
        "UPDATE runs SET workload='gemm_allgather', workload_path=?", (str(ROOT / "workloads" / "gemm_allgather"),)
    )
    db.commit()
    db.close()
    proc = cuco(home, "profile", "2", "--config", "nope")
    assert proc.returncode == 2 and "--config" in proc.stderr and "m8k_k4096" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(shutil.which("ncu") is not None, reason="ncu is installed here: the missing-ncu path cannot run")
def test_without_ncu_a_clear_message_and_exit_1(home):
    db = sqlite3.connect(home / "cuco.db")
    db.execute(
        "UPDATE runs SET workload='gemm_allgather', workload_path=?", (str(ROOT / "workloads" / "gemm_allgather"),)
    )
    db.commit()
    db.close()
    proc = cuco(home, "profile", "2", "--config", "small_m1k")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ncu (Nsight Compute) is not installed on this machine" in proc.stdout
    assert "--cluster" in proc.stdout and "Traceback" not in proc.stderr


def test_summary_of_a_recorded_ncu_raw_page():
    data = ROOT / "tests" / "gpu" / "data" / "ncu_raw_page.csv"
    if not data.exists():
        pytest.skip(f"{data} not recorded")
    kernels = summarize_ncu_csv(data.read_text())
    assert kernels, "no kernel read from the recorded page"
    assert all(k["launches"] >= 1 and k["duration_ms"] > 0 for k in kernels)
    assert all(k["sm_throughput_pct"] is None or 0 <= k["sm_throughput_pct"] <= 100 for k in kernels)
    assert any(k["sm_throughput_pct"] is not None and k["memory_throughput_pct"] is not None for k in kernels)
    assert kernels == sorted(kernels, key=lambda k: -k["duration_ms"])
    assert NCU_METRICS[1] in data.read_text()
    gemm = next(k for k in kernels if "gemm_kernel<FusedPushEpi>" in k["kernel"])  # the candidate's own kernel
    assert gemm["launches"] == 2 and 0.05 < gemm["duration_ms"] / 2 < 1.0  # ~86 us a launch (us in the CSV)
