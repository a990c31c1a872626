"""The end of a run, told at once: the real engine on workloads/demo finishes while the TUI is attached through
the daemon socket; within a second of the engine's end the header says `finished`, the banner gives the
reason, nothing says the engine "went away", the keys that steer the engine leave the footer, a control still
offered says the engine has ended, and `q` says the run ended, not that the engine keeps running."""

from __future__ import annotations

import asyncio
import time

import pytest

from cuco_tui.app import CucoApp
from cuco_tui.screens.insight import LlmScreen
from cuco_tui.settings import TuiSettings
from cuco_tui.widgets import KeyFooter
from cuco_tui.widgets.header import RunHeader
from cuco_tui.widgets.llm_panel import StrategiesTable, StrategyModal
from engine.daemon import protocol
from tests.tui.waiting import until

engine_mod = pytest.importorskip("engine.run.engine")

RUN = "demo-end-1"
MAX_EVALS = 3


def _text(widget) -> str:
    return str(widget.render())


async def test_a_run_that_finishes_while_attached_says_so_at_once(tmp_path):
    from engine.config import RunConfig
    from engine.daemon.daemon import serve
    from engine.workload import load_workload

    engine = await engine_mod.Engine.create(
        tmp_path, load_workload("demo"), RunConfig(max_evals=MAX_EVALS, concurrency=1), run_id=RUN
    )
    ended_at: list[float] = []
    run = engine.run

    async def timed_run() -> str:  # the moment the engine's run ends (its final state written)
        try:
            return await run()
        finally:
            ended_at.append(time.monotonic())

    engine.run = timed_run
    serving = asyncio.create_task(serve(engine, tmp_path, RUN))
    try:
        assert await until(lambda: protocol.live_run_info(tmp_path, RUN) is not None, 20)
        info = protocol.live_run_info(tmp_path, RUN)
        app = CucoApp(tmp_path, RUN, socket_path=info.socket, settings=TuiSettings(theme="cuco-dark"))
        async with app.run_test(size=(120, 30)) as pilot:
            assert await until(lambda: app.live, 20)
            assert await until(lambda: bool(ended_at), 120), "the run did not finish"
            header, banner = app.query_one(RunHeader), app.query_one("#banner")

            def told():
                return "[finished]" in _text(header) and f"reached {MAX_EVALS} evaluations" in _text(banner)

            assert await until(told, 1.0, step=0.02), (_text(header), _text(banner))
            told_at = time.monotonic()
            assert told_at - ended_at[0] <= 1.0, f"{told_at - ended_at[0]:.2f} s after the engine ended"
            await pilot.pause(1.5)  # past the first reconnect attempts: still told as finished, never lost
            assert "went away" not in _text(banner) and "[finished]" in _text(header), _text(banner)
            assert app.ended == ("finished", f"reached {MAX_EVALS} evaluations")
            # the keys that steer the engine leave the footer and are not taken; the banner says why
            footer = app.query_one(KeyFooter)
            assert await until(lambda: "Pause" not in str(footer.render()), 1.0), str(footer.render())
            for word in ("Stop", "Pause", "Accept", "Reject", "Fork"):
                assert word not in str(footer.render()), (word, str(footer.render()))
            await pilot.press("space")
            await pilot.pause(0.2)
            assert app.summary.state == "finished" and "[finished]" in _text(header)
            assert "engine has ended" in _text(banner), _text(banner)
            # a control still offered elsewhere (the LLM panel's new strategy) says why it cannot, no dialog
            await pilot.press("M")
            assert await until(lambda: isinstance(app.screen, LlmScreen), 5)
            app.screen.query_one(StrategiesTable).focus()
            await pilot.press("a")
            assert await until(lambda: any("engine has ended" in str(n.message) for n in app._notifications), 2), [
                str(n.message) for n in app._notifications
            ]
            assert not isinstance(app.screen, StrategyModal)
            await pilot.press("escape")
            await pilot.press("q")
        assert app.ended is not None
    finally:
        await asyncio.wait_for(serving, 60)
        await engine.close()
