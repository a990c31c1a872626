"""The engine daemon SIGKILLed while two viewers are attached: the viewers are told (they do not hang),
`cuco resume` restarts the engine from the store, the viewers reconnect by themselves and carry on from
the last event they had (no seq twice, none skipped), and the run finishes with nothing lost."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from cuco_tui.client import EngineClient, EngineError, EngineGone
from cuco_tui.verbs.detached import run_detached
from engine.config import RunConfig
from engine.daemon import protocol
from tests.chaos.chaos import check_invariants, cuco, leftover_processes, query

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

REPO = Path(__file__).resolve().parents[2]
MAX_EVALS = 8


async def _until(client: EngineClient, seen: list[int], done, timeout: float, over=lambda: False) -> None:
    """Collect events until `done(event)`, or until `over()` says the run ended (its daemon gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = await client.next_event(timeout=1.0)
        except TimeoutError:
            if over():
                return
            continue
        seen.append(int(event["seq"]))
        if done(event):
            return
    raise AssertionError(f"no end within {timeout} s")


def run_state(home: Path) -> str | None:
    rows = query(home / "cuco.db", "SELECT state FROM runs WHERE id='d'")
    return rows[0][0] if rows else None


@pytest.mark.timeout(600)  # bounded: 1-2.5 min on a busy 2-core box
def test_daemon_killed_with_viewers_attached_then_resumed(tmp_path: Path):
    home = (tmp_path / "home").resolve()
    assert run_detached(home, "d", REPO / "workloads" / "demo", RunConfig(max_evals=MAX_EVALS), None, attach=False) == 0
    info = protocol.live_run_info(home, "d")
    assert info is not None

    async def scenario() -> list[list[int]]:
        viewers = [EngineClient(info.socket, reconnect_attempts=60, reconnect_delay=0.25) for _ in range(2)]
        seen: list[list[int]] = [[], []]
        for v in viewers:
            await v.connect(since=0)
        results = [0, 0]

        def two_results(i):
            def done(event):
                results[i] += event["kind"] == "result"
                return results[i] >= 2

            return done

        await asyncio.gather(*(_until(v, seen[i], two_results(i), 300) for i, v in enumerate(viewers)))
        os.kill(info.pid, signal.SIGKILL)
        started = time.monotonic()
        for v in viewers:  # a viewer's request fails promptly: it is not left waiting on a dead engine
            with pytest.raises((EngineGone, EngineError)):
                await v.request("status", timeout=10)
        assert time.monotonic() - started < 30
        resumed = await asyncio.to_thread(cuco, home, "resume", "d")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        before = [len(s) for s in seen]

        def finished(e):
            return e["kind"] == "run" and e["data"].get("state") in ("finished", "failed", "stopped")

        def over():
            return protocol.live_run_info(home, "d") is None and run_state(home) == "finished"

        await asyncio.gather(*(_until(v, seen[i], finished, 400, over) for i, v in enumerate(viewers)))
        # each viewer reconnected by itself to the resumed engine and went on receiving its events
        assert all(v.reconnects >= 1 for v in viewers)
        assert all(len(s) > b for s, b in zip(seen, before)), "a viewer received nothing after the resume"
        for v in viewers:
            await v.close()
        return seen

    seen = asyncio.run(scenario())
    for seqs in seen:
        assert seqs == sorted(set(seqs)), "a viewer got an event twice or out of order"
    deadline = time.monotonic() + 60  # the daemon exits once the run is over (after it stopped serving)
    while (protocol.live_run_info(home, "d") is not None or leftover_processes(home)) and time.monotonic() < deadline:
        time.sleep(0.2)
    check_invariants(home, "d", MAX_EVALS)
