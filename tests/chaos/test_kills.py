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


@pytest.mark.timeout(600)   # bounded: 1-2.5 min on a busy 2-core box
def test_ten_random_sigkills_then_resume(tmp_path):
    home = tmp_path / "home"
    log = random_kills(home, "chaos", MAX_EVALS, KILLS, random.Random(20261124), timeout_s=540)
    assert log.kills >= KILLS - 2, f"only {log.kills} kills landed before the run finished"
    counts = check_invariants(home, "chaos", MAX_EVALS)
    print(f"{log.kills} kills at {log.killed_at_finals} evaluations; {counts}; {log.seconds:.0f} s")
