"""Engines started, stopped and resumed around each other in one home: four runs of the demo and two forks
of them, all sharing the home's jobs folder, while engines are stopped and resumed among them (every
resume reconciles its run's jobs at start-up). No run may meet an environment fault: a run alone on this
machine has none, so any is a job another engine killed or removed. And nothing is lost or evaluated twice."""

from __future__ import annotations

import random
import shutil
import subprocess
import time

import pytest

from engine.daemon import protocol
from engine.store.counting import COUNTS_SQL
from tests.chaos.chaos import check_invariants, cuco, query, start

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

MAX_EVALS = 8
RUNS = ("r1", "r2", "r3", "r4")
FORKS = {"f1": "r1", "f2": "r2"}
RESTARTS = 6  # stops then resumes, each while the other engines have jobs in flight


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _ok(result: subprocess.CompletedProcess, what: str) -> None:
    assert result.returncode == 0, f"{what}: exit {result.returncode}: {result.stdout[-1500:]}{result.stderr[-1500:]}"


def _environment_faults(db, run: str) -> list[tuple]:
    return query(
        db,
        "SELECT candidate_id, stage, status, rc FROM evaluations WHERE run_id=? AND fault='environment'",
        (run,),
    )


@pytest.mark.timeout(400)  # 1.5-3 min on a busy 2-core box
def test_engines_started_stopped_and_resumed_leave_each_others_jobs_alone(tmp_path):
    home, rng = tmp_path / "home", random.Random(20261129)
    db = home / "cuco.db"
    args = ("demo", "--headless", "--max-evals", str(MAX_EVALS), "--concurrency", "2")
    procs: dict[str, list[subprocess.Popen]] = {RUNS[0]: [start(home, "run", *args, "--name", RUNS[0])]}
    _wait(lambda: query(db, "SELECT 1 FROM runs"), 60, "the first run's row")
    for run in RUNS[1:]:
        procs[run] = [start(home, "run", *args, "--name", run)]

    everyone = (*RUNS, *FORKS)
    for fork, parent in FORKS.items():  # forked mid-search and started at once, beside their parents
        _wait(
            lambda parent=parent: query(db, f"SELECT 1 FROM candidates c WHERE c.run_id=? AND {COUNTS_SQL}", (parent,)),
            120,
            f"a correct candidate in {parent}",
        )
        _ok(cuco(home, "fork", parent, "--name", fork, "--start"), f"fork {parent}")

    restarted = 0
    deadline = time.monotonic() + 150
    while restarted < RESTARTS and time.monotonic() < deadline:
        live = [r for r in everyone if protocol.live_run_info(home, r) is not None]
        if len(live) < 2:  # the others have ended: nothing left to disturb
            break
        victim = rng.choice(live)
        stopped = cuco(home, "stop", victim)
        if stopped.returncode != 0 and query(db, "SELECT state FROM runs WHERE id=?", (victim,)) == [("finished",)]:
            continue  # it reached its end as the stop came
        _ok(stopped, f"stop {victim}")
        # resumed at once: its start-up reconciles its own jobs while the other engines' are in flight
        procs.setdefault(victim, []).append(start(home, "resume", victim, "--headless"))
        restarted += 1
        time.sleep(rng.uniform(0.3, 1.5))
    assert restarted >= 3, f"only {restarted} engines were restarted among the others"

    def ended(run: str) -> bool:
        return query(db, "SELECT state FROM runs WHERE id=?", (run,)) == [("finished",)]

    for run in everyone:  # each to its end: a stopped run's last engine may have been stopped again
        for proc in procs.get(run, []):
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, f"{run}: exit {proc.returncode}: {err.decode()[-2000:]}"
        if not ended(run) and protocol.live_run_info(home, run) is None:
            _ok(cuco(home, "resume", run, "--headless", timeout=240), f"resume {run}")
        _wait(lambda run=run: ended(run), 240, f"{run} to finish")

    faults = {run: _environment_faults(db, run) for run in everyone}
    assert all(not f for f in faults.values()), f"jobs killed or removed by another engine: {faults}"
    for run in everyone:
        check_invariants(home, run, MAX_EVALS)
    jobs = home / "jobs"
    assert not jobs.exists() or not list(jobs.iterdir()), "job directories left behind"
