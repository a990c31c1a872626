"""A control command that fails says so: one line, a non-zero exit, no traceback. Forking a live run before it
has a correct candidate, or accepting a candidate it does not have, is the user's to fix (exit 2; the
engine serves on and nothing is added); pausing a run that has ended fails (exit 1) instead of flipping its
state, and stopping it says it had ended."""

from __future__ import annotations

import asyncio
import sys

import pytest

from engine.daemon import protocol
from engine.store.store import ReadStore

engine_mod = pytest.importorskip("engine.run.engine")

RUN = "demo-early-1"


async def _cuco(home, *args: str) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cuco_tui.cli",
        "--home",
        str(home),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert "Traceback" not in err.decode(), err.decode()
    return proc.returncode, err.decode().strip().splitlines()


async def test_fork_before_the_first_correct_candidate_is_one_line_and_exit_2(tmp_path):
    from engine.config import RunConfig
    from engine.daemon.daemon import EngineServer
    from engine.workload import load_workload

    # created, not started: its seed waits, pending, so it has nothing correct to fork from
    engine = await engine_mod.Engine.create(tmp_path, load_workload("demo"), RunConfig(max_evals=4), run_id=RUN)
    server = EngineServer(engine, tmp_path, RUN)
    engine.store.on_event = server.on_event
    await server.start()
    try:
        for extra in ((), ("--start",)):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "cuco_tui.cli",
                "--home",
                str(tmp_path),
                "fork",
                RUN,
                *extra,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            lines = err.decode().strip().splitlines()
            assert proc.returncode == 2, (out, err)
            assert len(lines) == 1 and "Traceback" not in err.decode(), lines
            assert RUN in lines[0] and "no correct candidate" in lines[0] and "--from" in lines[0]
        rc, lines = await _cuco(tmp_path, "accept", RUN, "999999")
        assert rc == 2 and len(lines) == 1 and "no candidate 999999" in lines[0], lines
        assert protocol.live_run_info(tmp_path, RUN) is not None
        db = ReadStore(tmp_path)
        try:
            assert [r["id"] for r in db.runs()] == [RUN]
        finally:
            db.close()
    finally:
        await server.close()
        await engine.close()


def test_pausing_or_stopping_an_ended_run_leaves_it(tmp_path):
    import subprocess

    from storefill import fill_store

    fill_store(tmp_path, run_id="ended-1", n=3, state="finished")
    state = "finished"
    done = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(tmp_path), "pause", "ended-1"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1 and "nothing to pause" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(tmp_path), "stop", "ended-1"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0 and "finished already" in done.stdout, done.stdout + done.stderr
    db = ReadStore(tmp_path)
    try:
        assert db.run("ended-1")["state"] == state  # neither made paused nor stopped
    finally:
        db.close()
