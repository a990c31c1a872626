"""Runs and forks side by side in one home: four headless runs of the demo and two forks of them made
mid-search and started at once, every control verb on each (pause, resume, accept, reject, stop), SIGKILLs of
random engines among them, then each run resumed to its end. Every run's store must hold what the chaos suite
requires of one run alone: no candidate, stage or event lost or written twice, and nothing left running."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from engine.daemon import protocol
from engine.store.counting import COUNTS_SQL
from tests.chaos.chaos import check_invariants, cuco, query, start

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

MAX_EVALS = 10
RUNS = ("r1", "r2", "r3", "r4")
FORKS = {"f1": "r1", "f2": "r2"}


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _correct(db, run: str) -> list[int]:
    """The run's candidates that count (correct, not waiting for review: a loaded machine's noise can flag one)."""
    return [
        r[0]
        for r in query(db, f"SELECT c.id FROM candidates c WHERE c.run_id=? AND {COUNTS_SQL} ORDER BY c.id", (run,))
    ]


def _ok(result: subprocess.CompletedProcess, what: str) -> None:
    assert result.returncode == 0, f"{what}: exit {result.returncode}: {result.stdout[-1500:]}{result.stderr[-1500:]}"


@pytest.mark.timeout(400)
def test_four_runs_and_two_forks_side_by_side(tmp_path):
    home, rng = tmp_path / "home", random.Random(20261126)
    db = home / "cuco.db"
    # the first run creates the store; the others start beside it at once
    procs = {
        RUNS[0]: start(
            home, "run", "demo", "--headless", "--max-evals", str(MAX_EVALS), "--name", RUNS[0], "--concurrency", "1"
        )
    }
    _wait(lambda: query(db, "SELECT 1 FROM runs"), 60, "the first run's row")
    for run in RUNS[1:]:
        procs[run] = start(
            home, "run", "demo", "--headless", "--max-evals", str(MAX_EVALS), "--name", run, "--concurrency", "1"
        )

    everyone = (*RUNS, *FORKS)
    ended: list[str] = []  # runs that reached their end before their pause came

    def verbs(run: str) -> None:  # paused, a run waits for the verbs that follow
        _wait(
            lambda: (
                protocol.live_run_info(home, run) is not None
                or query(db, "SELECT state FROM runs WHERE id=?", (run,)) == [("finished",)]
            ),
            120,
            f"{run}'s engine",
        )
        paused = cuco(home, "pause", run)
        if paused.returncode != 0:  # an ended run says so on one line (exit 1) and stays as it was
            assert paused.returncode == 1 and "the run has finished; there is nothing to pause" in paused.stderr, (
                f"pause {run}: exit {paused.returncode}: {paused.stdout[-1500:]}{paused.stderr[-1500:]}"
            )
            assert query(db, "SELECT state FROM runs WHERE id=?", (run,)) == [("finished",)]
            ended.append(run)
        correct = _wait(lambda: _correct(db, run), 120, f"a correct candidate in {run}")
        _ok(cuco(home, "accept", run, str(correct[0]), "--note", "looked at it"), f"accept {run}")
        others = [
            r[0]
            for r in query(
                db,
                "SELECT id FROM candidates WHERE run_id=? AND status NOT IN "
                "('pending','running') AND id!=? ORDER BY id",
                (run, correct[0]),
            )
        ]
        if others:
            _ok(cuco(home, "reject", run, str(others[-1]), "--reason", "reads a peer's tile twice"), f"reject {run}")
        if run in ended:
            return
        resumed = cuco(home, "resume", run)
        if resumed.returncode != 0:  # paused with its last evaluations in flight, it reached its end paused
            assert resumed.returncode == 1 and "the run has finished; to search on, fork it" in resumed.stderr, (
                f"resume {run}: exit {resumed.returncode}: {resumed.stdout[-1500:]}{resumed.stderr[-1500:]}"
            )
            assert query(db, "SELECT state FROM runs WHERE id=?", (run,)) == [("finished",)]

    # Each run's verbs start as soon as its engine serves (a demo run's ten evaluations take seconds: verbs
    # held back until every fork is made would find the first runs ended), so they overlap: six writers,
    # six engines. Forks are made mid-search and started now (as the TUI's "start it now"), their parents
    # searching beside them once their own verbs have resumed them.
    with ThreadPoolExecutor(len(everyone)) as pool:
        done = [pool.submit(verbs, run) for run in RUNS]
        for fork, parent in FORKS.items():
            _wait(lambda parent=parent: _correct(db, parent), 120, f"a correct candidate in {parent}")
            _ok(cuco(home, "fork", parent, "--name", fork, "--start"), f"fork {parent}")
            done.append(pool.submit(verbs, fork))
        for future in done:
            future.result()
    assert len(ended) < len(everyone), "every run ended before its pause: none was paused while searching"

    live = [r for r in everyone if protocol.live_run_info(home, r) is not None]
    killed = rng.sample(live, min(2, len(live)))
    for run in killed:
        info = protocol.live_run_info(home, run)
        if info is not None:
            os.kill(info.pid, signal.SIGKILL)
            _wait(lambda info=info: not protocol.pid_alive(info.pid), 10, f"{run}'s engine to die")
    for run in killed:  # shown as died wherever the store still says running
        (stored,) = query(db, "SELECT state FROM runs WHERE id=?", (run,))[0]
        shown = json.loads(cuco(home, "report", run, "--json").stdout)
        assert shown["state"] == ("died" if stored == "running" else stored), (stored, shown["state"])
        listed = {r["run"]: r["state"] for r in json.loads(cuco(home, "ls", "--json").stdout)}
        assert listed[run] == shown["state"]
    with ThreadPoolExecutor(len(everyone)) as pool:
        list(pool.map(lambda run: _ok(cuco(home, "stop", run), f"stop {run}"), everyone))
    for proc in procs.values():
        proc.wait(60)
        proc.stderr.close()

    states = {r: s for r, s in query(db, "SELECT id, state FROM runs")}
    assert set(states) == set(everyone), states
    # each to its end, all at once again
    resumed = {run: start(home, "resume", run, "--headless") for run in everyone if states[run] != "finished"}
    for run, proc in resumed.items():
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"resume {run}: {err.decode()[-2000:]}"
    for run in everyone:
        check_invariants(home, run, MAX_EVALS)
    seqs = [s for (s,) in query(db, "SELECT seq FROM events ORDER BY seq")]
    assert len(seqs) == len(set(seqs))
    ids = [i for (i,) in query(db, "SELECT id FROM candidates")]
    assert len(ids) == len(set(ids))
    forks = dict(query(db, "SELECT id, parent_run FROM runs WHERE parent_run IS NOT NULL"))
    assert forks == FORKS
