"""The environment's faults are never the candidate's: a project home whose disk fills mid-run, and a job's
process killed from outside. The run pauses itself (disk) or retries the stage (kill); no candidate is
recorded failed for either, and `cuco resume` finishes the run once space is freed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.chaos.chaos import check_invariants, cuco, query, start

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")


@pytest.fixture
def small_home(tmp_path: Path):
    """A 2 MB tmpfs as the project home (CI runs as root); skipped, with the reason, where mount fails."""
    home = tmp_path / "home"
    home.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(home)], capture_output=True, text=True
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs as the project home: {mount.stderr.strip() or 'not root'}")
    try:
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], capture_output=True)


MAX_EVALS = 24


@pytest.mark.timeout(600)  # bounded: 1-2.5 min on a busy 2-core box
def test_disk_full_mid_run_pauses_then_resume_finishes(small_home: Path):
    home = small_home
    first = cuco(home, "run", "demo", "--headless", "--max-evals", str(MAX_EVALS), "--name", "full", timeout=600)
    db = home / "cuco.db"
    ((state, reason),) = query(db, "SELECT state, stop_reason FROM runs WHERE id='full'")
    # The disk filled before the run could finish: it paused itself, saying why and what to do, exit 1.
    assert first.returncode == 1, first.stderr[-3000:]
    assert state in ("paused", "running"), (state, reason)  # 'running' when not even that could be written
    assert "paused itself (no space)" in first.stderr and "cuco resume" in first.stderr, first.stderr[-2000:]
    assert "Traceback" not in first.stderr
    failed_for_space = query(
        db,
        "SELECT id, reason FROM candidates WHERE status IN ('failed','incorrect') AND "
        "(reason LIKE '%space%' OR reason LIKE '%Errno 28%' OR COALESCE(fault,'') = 'environment')",
    )
    assert failed_for_space == [], failed_for_space
    assert query(db, "SELECT COUNT(*) FROM candidates WHERE status IN ('pending','running')")[0][0] >= 1

    subprocess.run(["mount", "-o", "remount,size=64m", str(home)], check=True)  # space is freed
    second = cuco(home, "resume", "full", "--headless", timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    check_invariants(home, "full", MAX_EVALS)
    report = json.loads(cuco(home, "report", "full", "--json").stdout)
    assert report["state"] == "finished" and report["evaluated"] == MAX_EVALS
    assert report["faults"]["environment"] >= 1, report["faults"]  # the report says what met the full disk
    table = cuco(home, "report", "full")
    assert "environment fault(s) (no space" in table.stdout, table.stdout[-2000:]
    # the TUI's detail of a candidate that met the full disk says whose fault it was
    from cuco_tui.data import StoreView

    (cid,), *_ = query(db, "SELECT candidate_id FROM evaluations WHERE fault='environment'")
    logs = StoreView(home).detail(cid).logs
    assert "the environment's fault, not the candidate's: no space" in logs.plain, logs.plain[-2000:]


def _candidate_binaries(home: Path) -> list[int]:
    """Running harness processes (the candidate's binary) of jobs under `home`."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open(f"/proc/{pid}/comm").read().strip() != "cuco_candidate":
                continue
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(home)):
                pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.mark.timeout(600)  # bounded: 1-2.5 min on a busy 2-core box
def test_job_process_killed_from_outside_is_retried_not_failed(tmp_path: Path):
    home = tmp_path / "home"
    proc = start(home, "run", "demo", "--headless", "--max-evals", "6", "--name", "kill9")
    killed: list[str] = []
    deadline = time.monotonic() + 300
    while len(killed) < 2 and proc.poll() is None and time.monotonic() < deadline:
        for pid in _candidate_binaries(home):
            try:
                job = os.path.basename(os.readlink(f"/proc/{pid}/cwd"))
                os.kill(pid, signal.SIGKILL)  # the job's process only, as the OOM killer or an operator would
                killed.append(job)
            except OSError:
                pass
            break
        time.sleep(0.01)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert killed, "no job process was seen to kill"
    db = home / "cuco.db"
    check_invariants(home, "kill9", 6)
    kinds = query(db, "SELECT result_json FROM evaluations WHERE fault='environment'")
    assert len(kinds) >= len(killed), (killed, kinds)
    assert all(json.loads(k)["action"] == "retry" for (k,) in kinds), kinds
    assert query(db, "SELECT COUNT(*) FROM candidates WHERE status='done'")[0][0] == 6
