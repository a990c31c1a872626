"""The review queue, driven with Pilot against a live engine served through the real daemon socket: the
results beyond the overlap bound wait there with their numbers and diff, and `a` / `x` decide. The engine
runs on the synthetic executor (its results report compute 0.7 ms and communication 0.3 ms for a 1 ms
baseline, so the fastest candidates beat the bound): what is tested is the TUI and the counting rule."""

from __future__ import annotations

import asyncio

import pytest

from cuco_tui.app import CucoApp
from cuco_tui.screens import NoteModal, ReasonModal, ReviewScreen
from cuco_tui.settings import TuiSettings
from engine.config import RunConfig
from engine.daemon import protocol
from engine.daemon.daemon import serve
from engine.run.engine import Engine
from engine.store.store import ReadStore
from engine.workload import load_workload
from tests.engine.synthetic import SyntheticExecutor
from tests.tui.waiting import until

RUN = "review-1"


@pytest.fixture
async def live(tmp_path):
    ex = SyntheticExecutor(slots=2, durations={"build": 0.02, "verify": 0.02, "benchmark": 0.05})
    engine = await Engine.create(
        tmp_path, load_workload("demo"), RunConfig(max_evals=4000, concurrency=2), run_id=RUN, executor=ex
    )
    task = asyncio.create_task(serve(engine, tmp_path, RUN))
    assert await until(lambda: protocol.live_run_info(tmp_path, RUN) is not None, 20)
    yield tmp_path, protocol.live_run_info(tmp_path, RUN), engine
    await engine.stop()
    try:
        await asyncio.wait_for(task, 60)
    finally:
        await engine.close()


def waiting(db: ReadStore) -> list[int]:
    return [
        r["id"]
        for r in db.fetchall("SELECT id FROM candidates WHERE run_id=? AND review='needs_review' ORDER BY id", (RUN,))
    ]


async def test_review_queue_shows_numbers_and_diff_and_a_x_decide(live):
    home, info, engine = live
    db = ReadStore(home)
    assert await until(lambda: len(waiting(db)) >= 2, 60), "the synthetic run flagged nothing"
    await engine.pause(hard=True)  # nothing in flight: the queue stops growing
    queue = waiting(db)
    for _ in range(20):  # results are written behind: until two reads agree
        await asyncio.sleep(0.3)
        if waiting(db) == queue:
            break
        queue = waiting(db)
    assert engine.best is None or engine.best.id not in queue  # they do not count yet
    app = CucoApp(home, RUN, socket_path=info.socket, settings=TuiSettings(theme="cuco-dark"))
    async with app.run_test(size=(120, 36)) as pilot:
        assert await until(lambda: app.live, 20)
        await pilot.press("v")
        screen = app.screen
        assert isinstance(screen, ReviewScreen)
        table = screen.query_one("#review-table")
        assert await until(lambda: table.row_count == len(queue), 10)
        first = queue[0]
        assert "beat the overlap bound" in str(table.get_row(str(first))[2])
        # the numbers (per config, the flag) and the diff against the parent of the highlighted one
        numbers = screen.query_one("#review-numbers")
        assert await until(lambda: "beyond the overlap bound" in str(numbers.render()), 30)
        assert "#" in str(screen.query_one("#review-diff").render())

        # a: accept, with a note; it leaves the queue and counts
        table.move_cursor(row=0)
        await pilot.pause(0.2)
        await pilot.press("a")
        assert isinstance(app.screen, NoteModal)
        await pilot.press(*"checked the diff", "enter")
        assert await until(
            lambda: db.fetchone("SELECT review FROM candidates WHERE id=?", (first,))["review"] == "accepted", 20
        )
        assert await until(lambda: engine.cands[first].eligible, 10)
        assert table.row_count == len(queue) - 1

        # x: reject, with a reason; it never counts
        second = screen.selected_id()
        await pilot.press("x")
        assert isinstance(app.screen, ReasonModal)
        await pilot.press(*"times a cached answer", "enter")
        assert await until(
            lambda: db.fetchone("SELECT review FROM candidates WHERE id=?", (second,))["review"] == "rejected", 20
        )
        assert not engine.cands[second].eligible
        assert (db.latest_mark(second) or {}).get("text") == "times a cached answer"
        await pilot.press("escape")
        assert not isinstance(app.screen, ReviewScreen)
    db.close()
