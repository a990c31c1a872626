"""Every TUI control, pressed with Pilot, against the real Engine on workloads/demo (local executor) served
through the real daemon socket; each checks its effect in the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cuco_tui.app import CucoApp
from cuco_tui.screens import ConfirmModal, ForkModal, HelpScreen, NodesScreen, NoteModal, ReasonModal, RunsScreen
from cuco_tui.settings import TuiSettings
from cuco_tui.widgets import CandidatesTable
from engine.daemon import protocol
from engine.store.store import ReadStore
from tests.tui.waiting import until

engine_mod = pytest.importorskip("engine.run.engine")

RUN = "demo-tui-1"


@pytest.fixture
async def live(tmp_path):
    from engine.config import RunConfig
    from engine.daemon.daemon import serve
    from engine.workload import load_workload

    engine = await engine_mod.Engine.create(
        tmp_path, load_workload("demo"), RunConfig(max_evals=400, concurrency=1, islands=2), run_id=RUN
    )
    task = asyncio.create_task(serve(engine, tmp_path, RUN))
    assert await until(lambda: protocol.live_run_info(tmp_path, RUN) is not None, 20)
    info = protocol.live_run_info(tmp_path, RUN)
    yield tmp_path, info, engine
    await engine.stop()
    try:
        await asyncio.wait_for(task, 60)
    finally:
        await engine.close()


def _store(home: Path) -> ReadStore:
    return ReadStore(home)


async def test_controls_through_the_socket(live):
    home, info, engine = live
    app = CucoApp(home, RUN, socket_path=info.socket, settings=TuiSettings(theme="cuco-dark"))
    async with app.run_test(size=(100, 30)) as pilot:
        assert await until(lambda: app.live, 20)
        db = _store(home)
        # wait for two finished candidates
        assert await until(
            lambda: (
                db.fetchone(
                    "SELECT COUNT(*) AS n FROM candidates WHERE run_id=? AND status IN ('done','incorrect','failed')",
                    (RUN,),
                )["n"]
                >= 2
            ),
            90,
        )
        await pilot.pause(0.3)
        table = app.query_one(CandidatesTable)
        assert table.row_count >= 2

        # space: pause (soft), then resume
        await pilot.press("space")
        assert await until(lambda: db.run(RUN)["state"] == "paused", 30)
        assert await until(lambda: app.summary.state == "paused", 10)
        await pilot.press("space")
        assert await until(lambda: db.run(RUN)["state"] == "running", 30)

        # a: accept the selected candidate with a note
        table.move_cursor(row=0)
        await pilot.pause(0.2)
        cid = table.selected_id()
        await pilot.press("a")
        assert isinstance(app.screen, NoteModal)
        await pilot.press(*"nice overlap", "enter")
        assert await until(lambda: (db.latest_mark(cid) or {}).get("verdict") == "accept", 20)
        assert db.latest_mark(cid)["text"] == "nice overlap"
        assert await until(lambda: "nice" in (table.cell_text(cid, "mark") or ""), 10)

        # x: reject needs a reason; empty is refused in the modal
        table.move_cursor(row=1)
        await pilot.pause(0.2)
        cid2 = table.selected_id()
        await pilot.press("x")
        assert isinstance(app.screen, ReasonModal)
        await pilot.press("enter")
        assert isinstance(app.screen, ReasonModal)  # still open: a reason is required
        await pilot.press(*"reads out of bounds", "enter")
        assert await until(lambda: (db.latest_mark(cid2) or {}).get("verdict") == "reject", 20)
        assert db.latest_mark(cid2)["text"] == "reads out of bounds"

        # f: fork from the selected candidate with overrides
        await pilot.press("f")
        assert isinstance(app.screen, ForkModal)
        await pilot.press(*"wide")
        app.screen.query_one("#overrides").value = "islands=3"
        await pilot.press("enter")
        assert await until(lambda: any(r["parent_run"] == RUN for r in db.runs()), 30)
        fork = [r for r in db.runs() if r["parent_run"] == RUN][0]
        assert fork["state"] == "paused" and fork["fork_candidate"] == cid2 and '"islands": 3' in fork["config_json"]

        # r: runs screen shows the fork under its parent
        await pilot.press("r")
        assert isinstance(app.screen, RunsScreen)
        tree = app.screen.query_one("Tree")
        assert await until(lambda: len(tree.root.children) > 0, 20)
        parent = tree.root.children[0]
        assert parent.data == RUN and parent.children[0].data == fork["id"]
        await pilot.press("escape")

        # n: nodes screen; ?: help; both close with escape
        await pilot.press("n")
        assert isinstance(app.screen, NodesScreen)
        await pilot.press("escape")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")

        # /: SQL-side filter
        await pilot.press("slash", *"status=done", "enter")
        assert await until(lambda: table.filter_text == "status=done", 20)
        await pilot.pause(0.5)
        assert table.row_count
        for cid in table.row_ids():
            assert table.cell_text(cid, "status") == "done"

        # P: hard pause
        table.focus()
        await pilot.press("P")
        assert await until(lambda: db.run(RUN)["state"] == "paused", 30), (
            db.run(RUN),
            engine.state,
            [n.message for n in app._notifications],
            app.focused,
        )

        # ctrl+q: stop the run after a confirmation (No first, then Yes)
        await pilot.press("ctrl+q")
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("n")
        assert db.run(RUN)["state"] == "paused"
        await pilot.press("ctrl+q")
        await pilot.press("y")
        assert await until(lambda: db.run(RUN)["state"] in ("stopped", "finished"), 60)


async def test_detach_keeps_the_engine_running(live):
    home, info, engine = live
    app = CucoApp(home, RUN, socket_path=info.socket)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(lambda: app.live, 20)
        await pilot.press("q")
    assert app.detached
    assert engine.state == "running"
    assert protocol.live_run_info(home, RUN) is not None


async def test_keymap_remaps_a_binding(live):
    home, info, engine = live
    app = CucoApp(home, RUN, socket_path=info.socket, settings=TuiSettings(keymap={"pause": "p"}))
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(lambda: app.live, 20)
        await pilot.press("p")
        db = _store(home)
        assert await until(lambda: db.run(RUN)["state"] == "paused", 30)


async def test_read_only_without_engine(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from storefill import fill_store

    await asyncio.to_thread(fill_store, tmp_path, run_id="ro-1", n=12)
    app = CucoApp(tmp_path, "ro-1")
    async with app.run_test(size=(80, 24)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        assert "read-only" in str(app.query_one("#banner").render())
        await pilot.press("space")
        await pilot.press("a")
        assert not isinstance(app.screen, NoteModal)  # no modal: nothing to send it to
        assert ReadStore(tmp_path).run("ro-1")["state"] == "paused"


async def test_attach_to_a_dead_engine_is_read_only(tmp_path):
    """`cuco attach` on a run whose engine died (a stale run.json, its pid gone): read-only, with a banner."""
    import subprocess
    import sys
    import time

    sys.path.insert(0, str(Path(__file__).parent))
    from storefill import fill_store

    from cuco_tui.launch import live_engine

    await asyncio.to_thread(fill_store, tmp_path, run_id="dead-1", n=12, state="running")
    dead = subprocess.Popen(["true"])
    dead.wait()
    sock = tmp_path / "runs" / "dead-1" / "engine.sock"
    sock.parent.mkdir(parents=True, exist_ok=True)
    sock.touch()  # the socket file survived the crash
    protocol.write_run_info(
        tmp_path, protocol.RunInfo("dead-1", dead.pid, str(sock), protocol.PROTOCOL_VERSION, time.time())
    )
    info = await live_engine(tmp_path, "dead-1")
    assert info is None  # what attach_tui asks before opening the app
    app = CucoApp(tmp_path, "dead-1", socket_path=info.socket if info else None)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        banner = str(app.query_one("#banner").render())
        assert "read-only" in banner and "cuco resume dead-1" in banner
        assert "read-only" in str(app.query_one("#header").render())
        await pilot.press("space")  # refused: nothing to send it to
        await pilot.pause(0.1)
        assert ReadStore(tmp_path).run("dead-1")["state"] == "running"


async def test_meta_summarizer_advice_is_shown(tmp_path):
    """The LLM meta-summarizer's recommendations (run_state) appear in the engine log on attach."""
    import sqlite3
    import sys

    from textual.widgets import Log

    sys.path.insert(0, str(Path(__file__).parent))
    from storefill import fill_store

    await asyncio.to_thread(fill_store, tmp_path, run_id="adv-1", n=6)
    con = sqlite3.connect(tmp_path / "cuco.db")
    con.execute(
        "INSERT INTO run_state (run_id, key, value_json) VALUES (?,?,?)",
        ("adv-1", "recommendations", '["chunk flags beat the barrier", "comm threads cost more than they save"]'),
    )
    con.commit()
    con.close()
    app = CucoApp(tmp_path, "adv-1")
    async with app.run_test(size=(100, 30)):
        log = app.query_one("#engine-log", Log)
        assert await until(lambda: any("advice:" in line for line in log.lines), 20)
        line = next(line for line in log.lines if "advice:" in line)
        assert "chunk flags beat the barrier" in line and "comm threads" in line


async def test_detail_tabs_show_the_selected_candidate(tmp_path):
    """The visible tab shows the selected candidate at once; another tab shows the same candidate when it is
    opened (tabs are filled lazily); moving the cursor moves the detail."""
    import sys

    from textual.widgets import Static

    sys.path.insert(0, str(Path(__file__).parent))
    from storefill import fill_store

    await asyncio.to_thread(fill_store, tmp_path, run_id="det-1", n=12)
    app = CucoApp(tmp_path, "det-1")
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count == 12, 20)
        table.focus()
        await pilot.press("home")
        await pilot.press("down", "down", "down")  # candidate #4, a child of #2
        assert await until(lambda: app.detail is not None and app.detail.id == table.selected_id(), 10)
        cid = table.selected_id()
        diff = str(app.query_one("#detail-diff", Static).render())
        assert f"#{cid}" in diff and "@@" in diff, diff[:500]
        assert app.query_one("#detail-tabs").active == "tab-diff"

        await pilot.press("3")  # focus the detail pane, then open Source
        app.query_one("#detail-tabs").active = "tab-source"
        await pilot.pause(0.2)
        source = str(app.query_one("#detail-source", Static).render())
        assert f"+ {cid - 1}.0f * 0.0f" in source, source[:500]

        table.focus()
        await pilot.press("up")
        assert await until(lambda: app.detail is not None and app.detail.id == cid - 1, 10)
        await pilot.pause(0.1)
        source = str(app.query_one("#detail-source", Static).render())
        assert f"+ {cid - 2}.0f * 0.0f" in source, source[:500]


async def test_footer_lists_the_keys_and_a_click_runs_one(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from storefill import fill_store

    from cuco_tui.widgets import KeyFooter

    await asyncio.to_thread(fill_store, tmp_path, run_id="foot-1", n=6, state="finished")
    app = CucoApp(tmp_path, "foot-1")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        footer = app.query_one(KeyFooter)
        text = str(footer.render())
        for key in ("/ Filter", "? Help", "q Detach"):
            assert key in text, (key, text)
        for word in ("Stop", "Pause", "Accept", "Reject", "Fork"):  # a finished run, read-only: nothing to steer
            assert word not in text, (word, text)
        x = text.index("? Help")
        await pilot.click(KeyFooter, offset=(x + 1, 0))
        assert await until(lambda: isinstance(app.screen, HelpScreen), 5)
        await pilot.press("escape")
        await pilot.press("slash")  # the filter has the focus: the footer follows
        await pilot.pause(0.2)
        assert "Filter" in str(footer.render())


async def test_metrics_tab_shows_per_config_numbers_and_the_overlap_bound_flag(tmp_path):
    """A finished run (the real engine, a synthetic executor whose harness reports compute 0.7 ms and
    communication 0.3 ms): the Metrics tab of a candidate that beat the bound shows its per-config table
    and the flag; one that did not shows the table without it."""
    import json

    from textual.widgets import Static

    from engine.config import RunConfig
    from engine.workload import load_workload
    from tests.engine.synthetic import SyntheticExecutor

    engine = await engine_mod.Engine.create(
        tmp_path,
        load_workload("demo"),
        RunConfig(max_evals=60, concurrency=4),
        run_id="flag-1",
        executor=SyntheticExecutor(slots=4),
    )
    assert await engine.run() == "finished"
    await engine.close()
    rs = ReadStore(tmp_path)
    rows = rs.fetchall("SELECT id, metrics_json FROM candidates WHERE run_id='flag-1' AND status='done'")
    rs.close()
    flagged = [r["id"] for r in rows if json.loads(r["metrics_json"]).get("flags")]
    plain = [r["id"] for r in rows if not json.loads(r["metrics_json"]).get("flags")]
    assert flagged and plain
    app = CucoApp(tmp_path, "flag-1")
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count >= len(rows), 20)
        app.query_one("#detail-tabs").active = "tab-metrics"
        for cid, beyond in ((flagged[0], True), (plain[0], False)):
            assert table.select(cid)
            assert await until(lambda cid=cid: app.detail is not None and app.detail.id == cid, 10)
            await pilot.pause(0.2)
            text = str(app.query_one("#detail-metrics", Static).render())
            assert "per config (benchmark)" in text and " -> " in text and "comp 0.7" in text, text[:800]
            assert ("beyond the overlap bound" in text) == beyond, text[:800]
