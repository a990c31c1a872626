"""Forking a live run before it has a correct candidate is the user's to fix: one line naming the run and
what to pass, exit 2, no traceback; the engine serves on and no run is added."""

from __future__ import annotations

import asyncio
import sys

import pytest

from engine import protocol
from engine.store import ReadStore

engine_mod = pytest.importorskip("engine.engine")

RUN = "demo-early-1"


async def test_fork_before_the_first_correct_candidate_is_one_line_and_exit_2(tmp_path):
    from engine.config import RunConfig
    from engine.daemon import EngineServer
    from engine.workload import load_workload
    # created, not started: its seed waits, pending, so it has nothing correct to fork from
    engine = await engine_mod.Engine.create(tmp_path, load_workload("demo"), RunConfig(max_evals=4), run_id=RUN)
    server = EngineServer(engine, tmp_path, RUN)
    engine.store.on_event = server.on_event
    await server.start()
    try:
        for extra in ((), ("--start",)):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cuco_tui.cli", "--home", str(tmp_path), "fork", RUN, *extra,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            lines = err.decode().strip().splitlines()
            assert proc.returncode == 2, (out, err)
            assert len(lines) == 1 and "Traceback" not in err.decode(), lines
            assert RUN in lines[0] and "no correct candidate" in lines[0] and "--from" in lines[0]
        assert protocol.live_run_info(tmp_path, RUN) is not None
        db = ReadStore(tmp_path)
        try:
            assert [r["id"] for r in db.runs()] == [RUN]
        finally:
            db.close()
    finally:
        await server.close()
        await engine.close()
