"""The candidates table sorted by key and by mouse, jump to best, and the toasts a person should not miss."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from storefill import FakeEngine, fill_store
from waiting import until

from cuco_tui.app import CucoApp
from cuco_tui.widgets import CandidatesTable
from engine.contract import Best, Result
from engine.daemon.daemon import EngineServer

RUN = "tbl-1"


def _speedups(home: Path) -> dict[int, float | None]:
    con = sqlite3.connect(home / "cuco.db")
    try:
        return dict(con.execute("SELECT id, speedup FROM candidates WHERE run_id=?", (RUN,)).fetchall())
    finally:
        con.close()


def _column(table: CandidatesTable, key: str) -> list[str]:
    return [table.cell_text(cid, key) for cid in table.row_ids()]


async def test_sort_by_key_and_by_clicking_a_header(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=60)
    speedups = _speedups(tmp_path)
    ranked = sorted((s, cid) for cid, s in speedups.items() if s is not None)
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(160, 30)) as pilot:  # wide enough for every column (a narrow pane drops some)
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count == 60)
        table.focus()
        assert table.row_ids() == sorted(speedups)  # proposal order, newest at the bottom

        await pilot.press("s")  # sort: speedup, the best on top
        assert await until(lambda: table.sort == ("speedup", True))
        assert table.row_ids()[0] == ranked[-1][1] and table.selected_id() == ranked[-1][1]
        shown = [float(t.rstrip("x")) for t in _column(table, "speedup") if t]
        assert shown == sorted(shown, reverse=True) and len(shown) == len(ranked)
        assert _column(table, "speedup")[-1] == ""  # no speedup (failed, incorrect): last
        assert "speedup ▼" in str(table.render_line(0).text)

        await pilot.press("S")  # reversed: the slowest correct one on top
        assert await until(lambda: table.sort == ("speedup", False))
        assert table.row_ids()[0] == ranked[0][1]
        assert "speedup ▲" in str(table.render_line(0).text)

        header = str(table.render_line(0).text)
        await pilot.click(
            CandidatesTable, offset=(header.index("isl") + 1, 1)
        )  # the mouse (inside the border): by island
        assert await until(lambda: table.sort == ("island", False))
        islands = [int(t) for t in _column(table, "island")]
        assert islands == sorted(islands) and islands[0] == 0 and islands[-1] == 1
        await pilot.click(CandidatesTable, offset=(header.index("isl") + 1, 1))  # again: reversed
        assert await until(lambda: table.sort == ("island", True))
        assert int(_column(table, "island")[0]) == 1

        await pilot.press("s")  # sorted by anything: back to proposal order
        assert await until(lambda: table.sort is None)
        assert table.sort is None and table.row_ids() == sorted(speedups)


async def test_jump_to_best_outside_the_window(tmp_path):
    """The best is older than the newest 1000 rows the table holds: `b` finds and selects it anyway."""
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=1300, blobs_for=20)
    con = sqlite3.connect(tmp_path / "cuco.db")
    con.execute("UPDATE candidates SET speedup=9.5, time_ms=1.05, fitness=5000 WHERE id=7")
    con.commit()
    con.close()
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(
            lambda: table.row_count == 1000 and app.summary.best is not None and app.summary.best.candidate == 7
        )
        assert 7 not in table.row_ids()
        await pilot.press("b")
        assert await until(lambda: table.selected_id() == 7)
        assert await until(lambda: app.detail is not None and app.detail.id == 7, 10)
        assert "9.500x" in str(app.query_one("#header").render())


def _toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_toasts_for_a_new_best_a_lost_node_and_a_candidate_for_review(tmp_path):
    engine = await FakeEngine.open(tmp_path, RUN, max_candidates=4, interval=0.01)
    server = EngineServer(engine, tmp_path, RUN)
    engine.store.on_event = server.on_event
    info = await server.start()
    task = asyncio.create_task(engine.run())
    try:
        app = CucoApp(tmp_path, RUN, socket_path=info.socket)
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            assert await until(lambda: app.live and engine.created == 4)
            # the engine's node states reach the TUI in its status replies, which it asks for every few seconds
            status = engine.status()
            status["nodes"] = [
                {"name": "gpu-a", "healthy": True, "quarantined": True, "detail": "3 failures in 300 s"},
                {"name": "gpu-b", "healthy": False, "quarantined": False, "detail": "connection lost"},
                {"name": "gpu-c", "healthy": True, "quarantined": False},
            ]
            engine.status = lambda: status
            async with engine.store.transaction() as tx:
                await tx.execute("UPDATE candidates SET speedup=1.5, time_ms=6.7, fitness=5000 WHERE id=3")
                await tx.event(RUN, Best(id=3, speedup=1.5, time_ms=6.7))
                await tx.execute("UPDATE candidates SET review='needs_review' WHERE id=2 AND run_id=?", (RUN,))
                await tx.event(
                    RUN,
                    Result(
                        id=2,
                        status="done",
                        correct=True,
                        speedup=None,
                        time_ms=None,
                        reason=None,
                        fitness=None,
                        review="needs_review",
                    ),
                )
            assert await until(lambda: len(_toasts(app)) >= 4, 15), _toasts(app)
            await pilot.pause(0.5)
            texts = _toasts(app)
            assert any("new best #3 1.500x" in t for t in texts), texts
            assert any("gpu-a quarantined" in t for t in texts), texts
            assert any("gpu-b lost: connection lost" in t for t in texts), texts
            assert not any("gpu-c" in t for t in texts), texts
            review = [t for t in texts if "review" in t]
            assert len(review) == 1 and "#2" in review[0], texts  # the event and the store: one toast
            # the toast is on the screen, not only in a list
            from textual.widgets._toast import Toast

            assert await until(lambda: any("new best #3" in str(w.render()) for w in app.screen.query(Toast)))
            await pilot.press("b")
            assert await until(lambda: app.query_one(CandidatesTable).selected_id() == 3)
            # a node lost later: the next status reply says so
            status["nodes"] = [{"name": "gpu-d", "healthy": False, "quarantined": False, "detail": "ssh: timed out"}]
            assert await until(lambda: any("gpu-d lost: ssh: timed out" in t for t in _toasts(app)), 15), _toasts(app)
            assert "nodes 0/1 busy" in str(app.query_one("#header").render())
    finally:
        await engine.stop()
        await asyncio.wait_for(task, 10)
        await server.close()
