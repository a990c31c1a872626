"""The screens of a live run tell the truth while it streams (a small engine with the Engine contract behind
the real daemon socket): the detail follows the cursor, the Lineage tab lists new children, the footer says
what space does now, and the nodes screen keeps its running jobs through the engine's status updates."""

from __future__ import annotations

import asyncio
import html
import re
import sqlite3
import sys
import time
from pathlib import Path

from textual.widgets import DataTable, Static

import cuco_tui.app as app_module
from cuco_tui.app import CucoApp
from cuco_tui.screens import NodesScreen
from cuco_tui.settings import TuiSettings
from cuco_tui.widgets import CandidatesTable, KeyFooter
from engine.store.store import DB_NAME
from tests.tui.waiting import until

sys.path.insert(0, str(Path(__file__).parent))
from storefill import serve, shutdown  # noqa: E402

RUN = "live-1"


def _app(home: Path, info) -> CucoApp:
    return CucoApp(home, RUN, socket_path=info.socket, settings=TuiSettings(theme="cuco-dark"))


def _text(app: CucoApp, key: str) -> str:
    return str(app.query_one(f"#detail-{key}", Static).render())


async def test_detail_follows_the_cursor_while_following_the_tail(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.03, max_candidates=60)
    try:
        app = _app(tmp_path, info)
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.query_one(CandidatesTable)
            assert await until(lambda: app.live and table.row_count >= 10, 20)
            assert table.cursor_row == table.row_count - 1  # at the bottom: it follows the tail
            await pilot.press("up")  # off the tail while rows keep coming
            chosen = table.selected_id()
            assert await until(lambda: app.detail is not None and app.detail.id == chosen, 10)
            assert table.selected_id() == chosen and table.row_count < 60
            assert f"#{chosen}: its change" in _text(app, "diff")  # the tab names its candidate
            await pilot.press("ctrl+end")  # follow again, to the last row
            assert await until(lambda: table.row_count == 60, 20)
            last = table.row_ids()[-1]
            assert await until(
                lambda: table.selected_id() == last and app.detail is not None and app.detail.id == last, 10
            ), (table.selected_id(), app.detail and app.detail.id)
            assert f"#{last}: its change" in _text(app, "diff")
            assert f"detail of #{last}" in app.query_one("#detail").border_title
    finally:
        await shutdown(engine, server, task)


async def test_lineage_tab_lists_new_children(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.1, max_candidates=25, children_of_first=True)
    try:
        app = _app(tmp_path, info)
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.query_one(CandidatesTable)
            assert await until(lambda: app.live and table.row_count >= 3, 20)
            await pilot.press("ctrl+home")  # the first: every later one is its child
            first = table.selected_id()
            await pilot.press("left_square_bracket")  # from Diff, back round to Lineage
            assert app.query_one("#detail-tabs").active == "tab-lineage"

            def children() -> int:
                found = re.search(r"children \((\d+)\)", _text(app, "lineage"))
                return int(found.group(1)) if found else 0

            assert await until(lambda: app.detail is not None and app.detail.id == first, 10)
            seen = children()
            assert await until(lambda: children() >= 24, 20), (seen, children())  # more than when selected
            assert seen < 24 and f"#{first}: its ancestors and children" in _text(app, "lineage")
            assert table.selected_id() == first
    finally:
        await shutdown(engine, server, task)


async def test_footer_says_resume_while_paused(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.05, max_candidates=5)
    try:
        app = _app(tmp_path, info)
        async with app.run_test(size=(100, 30)) as pilot:
            footer = app.query_one(KeyFooter)
            assert await until(lambda: app.live and "space Pause" in str(footer.render()), 20)
            await pilot.press("space")
            assert await until(lambda: "space Resume" in str(footer.render()), 10), str(footer.render())
            text = str(footer.render())
            assert "Pause " not in text and "^q Stop" in text and "a Accept" in text
            await pilot.press("space")
            assert await until(lambda: "space Pause" in str(footer.render()), 10), str(footer.render())
    finally:
        await shutdown(engine, server, task)


async def test_nodes_screen_keeps_running_jobs_through_status_updates(tmp_path, monkeypatch):
    monkeypatch.setattr(app_module, "NODES_POLL_S", 0.2)  # the 5 s poll, faster
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.05, max_candidates=3)
    engine.nodes = [{"name": "gpu-a", "healthy": True, "gpus_total": 2, "gpus_busy": 1, "running_jobs": 1}]
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute(
        "INSERT INTO jobs (id, run_id, candidate_id, stage, state, node, attempts, created_at, updated_at) "
        "VALUES (?,?,?,?,?,?,?,?,?)",
        (f"{RUN}-1-benchmark", RUN, 1, "benchmark", "running", "gpu-a", 1, time.time(), time.time()),
    )
    db.commit()
    db.close()
    try:
        app = _app(tmp_path, info)
        async with app.run_test(size=(100, 30)) as pilot:
            assert await until(lambda: app.live, 20)
            await pilot.press("n")
            assert await until(lambda: isinstance(app.screen, NodesScreen), 5)
            jobs = app.screen.query_one("#jobs-table", DataTable)
            nodes = app.screen.query_one("#nodes-table", DataTable)
            assert await until(lambda: jobs.row_count == 1 and "gpu-a" in nodes.rows, 10)
            for _ in range(10):  # status replies keep arriving
                await pilot.pause(0.2)
                assert jobs.row_count == 1, "a node update emptied the running jobs"
            assert jobs.get_row_at(0)[1] == "benchmark"
    finally:
        await shutdown(engine, server, task)


async def test_a_fork_gets_one_toast(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.05, max_candidates=4)
    try:
        app = _app(tmp_path, info)
        async with app.run_test(size=(100, 30)) as pilot:
            table = app.query_one(CandidatesTable)
            assert await until(lambda: app.live and table.row_count >= 2, 20)
            await pilot.press("f")
            await pilot.press(*"branch", "enter")  # the name; Enter forks (not started)
            new_run = f"{RUN}-branch"

            def toasts() -> list[str]:
                return [str(n.message) for n in app._notifications if new_run in str(n.message)]

            assert await until(lambda: len(toasts()) >= 1, 10)
            assert await until(lambda: any(new_run in line for line in app.query_one("#engine-log").lines), 10)
            await pilot.pause(0.5)  # the engine's fork event has come too
            assert toasts() == [f"forked {new_run}, paused (start it: cuco resume {new_run})"], toasts()
    finally:
        await shutdown(engine, server, task)


async def test_diff_tab_shows_the_change_at_the_end_of_a_long_line(tmp_path):
    from storefill import fill_store

    await asyncio.to_thread(fill_store, tmp_path, run_id="long-1", n=12, long_line=True)
    app = CucoApp(tmp_path, "long-1")
    async with app.run_test(size=(100, 50)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count == 12, 20)
        await pilot.press("up")
        cid = table.selected_id()
        assert await until(lambda: app.detail is not None and app.detail.id == cid, 10)
        await pilot.pause(0.3)
        parent = app.detail.row["parent_id"]
        diff = app.query_one("#detail-diff", Static)
        assert diff.size.width < 100 and diff.virtual_region.height > len(_text(app, "diff").splitlines())
        screen = html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot()))  # the text on the screen
        for number in (parent - 1, cid - 1):  # the old and the new tail are both visible
            assert f'candidate {number}";' in screen.replace("\xa0", " "), number


async def test_three_and_brackets_reach_the_detail_tabs(tmp_path):
    from storefill import fill_store
    from textual.widgets import Tabs

    await asyncio.to_thread(fill_store, tmp_path, run_id="tabs-1", n=6)
    app = CucoApp(tmp_path, "tabs-1")
    async with app.run_test(size=(100, 30)) as pilot:
        tabs = app.query_one("#detail-tabs")
        await pilot.press("3")  # the tab bar takes the focus ...
        assert isinstance(app.focused, Tabs)
        await pilot.press("right")  # ... and the arrows switch tabs
        assert await until(lambda: tabs.active == "tab-source", 5)
        app.query_one(CandidatesTable).focus()
        await pilot.press("right_square_bracket")  # from anywhere: the next tab
        assert await until(lambda: tabs.active == "tab-metrics", 5)
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert await until(lambda: tabs.active == "tab-diff", 5)
        assert isinstance(app.focused, CandidatesTable)  # the cursor keys still move the table
