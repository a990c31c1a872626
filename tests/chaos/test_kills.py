"""Random SIGKILLs of the headless engine, each followed by `cuco resume`: no candidate is lost or
duplicated, every stage ran once per candidate, no event seq was handed out twice, and nothing of the
run is left running. The long form (50 kills) is tests/bench/chaos_kills.py."""

from __future__ import annotations

import random
import shutil

import pytest

from tests.chaos.chaos import check_invariants, random_kills

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

KILLS = 10
MAX_EVALS = 14


@pytest.mark.timeout(600)  # bounded: 1-2.5 min on a busy 2-core box
def test_ten_random_sigkills_then_resume(tmp_path):
    home = tmp_path / "home"
    log = random_kills(home, "chaos", MAX_EVALS, KILLS, random.Random(20261124), timeout_s=540)
    assert log.kills >= KILLS - 2, f"only {log.kills} kills landed before the run finished"
    counts = check_invariants(home, "chaos", MAX_EVALS)
    print(f"{log.kills} kills at {log.killed_at_finals} evaluations; {counts}; {log.seconds:.0f} s")


# The process dies right after the run's row is committed and before its seed's: the moment a SIGKILL of
# `cuco run` can leave a run with no candidate at all. Killing at exactly that instant from outside is a
# race, so the child kills itself there (os._exit, no cleanup, as SIGKILL) and the rest is the real CLI.
DIE_BEFORE_SEED = """
import os, sys
from engine.run.engine import Engine
Engine._add_seed = lambda self: os._exit(137)
from cuco_tui.cli import main
sys.argv = ["cuco"] + sys.argv[1:]
main()
"""


@pytest.mark.timeout(300)
def test_killed_between_run_and_seed_then_resume(tmp_path):
    import subprocess
    import sys

    from tests.chaos.chaos import cuco, cuco_env

    home = tmp_path / "home"
    died = subprocess.run(
        [
            sys.executable,
            "-c",
            DIE_BEFORE_SEED,
            "--home",
            str(home),
            "run",
            "demo",
            "--headless",
            "--name",
            "early",
            "--max-evals",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=cuco_env(),
    )
    assert died.returncode == 137, died.stderr[-2000:]
    resumed = cuco(home, "resume", "early", "--headless", timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    check_invariants(home, "early", 4)
