"""SIGKILL the engine at several points of a real demo run, resume it from the store each time, and
prove that no candidate is lost or evaluated twice and that the final counts add up."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

MAX_EVALS = 10
CLI = [sys.executable, "-m", "cuco_tui.cli"]


def finals(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("SELECT COUNT(*) FROM candidates WHERE status IN ('done','incorrect','failed')").fetchone()[
            0
        ]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def start(args: list[str], home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        CLI + ["--home", str(home)] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def proposals(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def kill_when(proc: subprocess.Popen, db: Path, at_least: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while proposals(db) < 1 or finals(db) < at_least:
        assert proc.poll() is None, f"engine exited early: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # the engine only: its jobs are orphaned, as in a real crash
    proc.wait(30)


def test_sigkill_at_several_points_then_resume(tmp_path):
    home = tmp_path / "home"
    db = home / "cuco.db"
    proc = start(["run", "demo", "--headless", "--max-evals", str(MAX_EVALS), "--name", "k"], home)
    kill_when(proc, db, 0)  # killed before the seed finished (possibly mid-build)
    for point in (2, 5, 8):  # and again at later points, each time after a resume
        proc = start(["resume", "k", "--headless"], home)
        kill_when(proc, db, point)
    proc = start(["resume", "k", "--headless"], home)
    _, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err.decode()[-3000:]

    conn = sqlite3.connect(db)
    run = conn.execute("SELECT state FROM runs WHERE id='k'").fetchone()
    assert run[0] == "finished"
    rows = conn.execute(
        "SELECT id, number, status, source_hash FROM candidates WHERE run_id='k' ORDER BY number"
    ).fetchall()
    numbers = [r[1] for r in rows]
    assert numbers == list(range(len(rows))), "a proposal was lost (a gap in the numbering)"
    assert len({r[3] for r in rows}) == len(rows), "the same source was evaluated twice"
    statuses = [r[2] for r in rows]
    assert all(s in ("done", "incorrect", "failed") for s in statuses), statuses
    assert len(rows) == MAX_EVALS
    for cid, *_ in rows:
        stages = [s for (s,) in conn.execute("SELECT stage FROM evaluations WHERE candidate_id=?", (cid,))]
        assert stages.count("build") == 1, f"candidate {cid} was built {stages.count('build')} times"
        assert stages.count("verify") <= 1
    seqs = [s for (s,) in conn.execute("SELECT seq FROM events ORDER BY seq")]
    assert len(seqs) == len(set(seqs))
    conn.close()

    report = subprocess.run(CLI + ["--home", str(home), "report", "k", "--json"], capture_output=True, text=True)
    import json

    data = json.loads(report.stdout)
    assert data["evaluated"] == MAX_EVALS
    assert data["correct"] + data["failed"] == data["evaluated"]
    assert data["pending"] == 0
    # nothing of the killed engines is still running
    leftovers = subprocess.run(["pgrep", "-f", str(home / "jobs")], capture_output=True, text=True).stdout.split()
    assert not [
        p for p in leftovers if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"
    ]
