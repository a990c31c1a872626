"""The timeline tab of the candidate detail, driven with Pilot on a real demo run's store (its keys: zoom, pan,
config, the parent beside it), and a snapshot of it on a deterministically filled store."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from storefill import fill_store  # noqa: E402
from waiting import until  # noqa: E402

from cuco_tui.app import CucoApp  # noqa: E402
from cuco_tui.messages import CandidateSelected  # noqa: E402
from cuco_tui.settings import TuiSettings  # noqa: E402
from cuco_tui.widgets.timeline import TimelineView  # noqa: E402
from engine.run import result_rows  # noqa: E402
from engine.store.store import DB_NAME  # noqa: E402
from engine.timeline import timeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUN = "tl-tui"


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the demo workload")
    home = tmp_path_factory.mktemp("tl-home")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuco_tui.cli",
            "--home",
            str(home),
            "run",
            "demo",
            "--headless",
            "--max-evals",
            "3",
            "--islands",
            "1",
            "--name",
            RUN,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return home


def _text(view: TimelineView, pane: str) -> str:
    return str(view.query_one(f"#timeline-{pane}").render())


async def test_timeline_tab_keys_on_a_real_run(demo_home):
    db = sqlite3.connect(demo_home / DB_NAME)
    child, parent = db.execute(
        "SELECT id, parent_id FROM candidates WHERE run_id=? AND parent_id IS NOT NULL "
        "AND status='done' ORDER BY id LIMIT 1",
        (RUN,),
    ).fetchone()
    db.close()
    app = CucoApp(demo_home, RUN, settings=TuiSettings(theme="cuco-dark"))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(0.3)
        app.query_one("#detail-tabs").active = "tab-timeline"
        app.post_message(CandidateSelected(child))
        view = app.query_one(TimelineView)
        assert await until(lambda: view.candidate_id == child and view.mine)
        await pilot.pause(0.1)
        text = _text(view, "mine")
        assert f"#{child} tall (1/2)" in text and "overlap" in text and "critical rank" in text
        assert "rank 0" in text and "link 0" in text and "rank 1" in text and "link 1" in text
        assert "█" in text  # something ran, drawn in its colour
        whole = view.window()
        view.focus()
        await pilot.press("plus")
        await pilot.pause(0.05)
        assert view.zoom == 2.0 and view.window()[1] - view.window()[0] == pytest.approx((whole[1] - whole[0]) / 2)
        await pilot.press("right", "right", "right", "right")
        assert view.window()[1] == pytest.approx(whole[1])  # panned to the end of the call, no further
        await pilot.press("minus")
        assert view.zoom == 1.0
        await pilot.press("c")
        await pilot.pause(0.05)
        assert f"#{child} square (2/2)" in _text(view, "mine")
        await pilot.press("p")
        await pilot.pause(0.1)
        assert view.query_one("#timeline-parent").display
        assert f"parent #{parent} square" in _text(view, "parent")
        await pilot.press("p")
        await pilot.pause(0.05)
        assert not view.query_one("#timeline-parent").display


def synthetic_records(fused: bool, ranks: int = 2) -> dict:
    """Deterministic cpu-link records: sequential (compute, barrier, put, wait) or fused (chunks put while
    computing), the format the CPU harness writes."""
    events, rank_rows = [], []
    for r in range(ranks):
        start = 10.0 * r
        if fused:
            for k in range(8):
                t = start + 200 * (k + 1)
                events.append(
                    {
                        "k": "put",
                        "rank": r,
                        "dst": 1 - r,
                        "t0": t,
                        "carried": t,
                        "t1": t + 260,
                        "bytes": 65536,
                        "helper": False,
                    }
                )
            events.append({"k": "wait", "rank": r, "t0": 1610 + start, "t1": 2100, "helper": False})
            ret = 2100.0
        else:
            events.append({"k": "barrier", "rank": r, "t0": 1500 + 100 * r, "t1": 1700, "helper": False})
            events.append(
                {
                    "k": "put",
                    "rank": r,
                    "dst": 1 - r,
                    "t0": 1700,
                    "carried": 1700,
                    "t1": 3700,
                    "bytes": 1 << 20,
                    "helper": False,
                }
            )
            events.append({"k": "wait", "rank": r, "t0": 1701, "t1": 3710, "helper": False})
            ret = 3710.0
        rank_rows.append({"rank": r, "start": start, "return": ret})
    return {"source": "cpu-link", "unit": "us", "end": 3720.0, "dropped": 0, "ranks": rank_rows, "events": events}


def make_app_with_timelines() -> CucoApp:
    home = Path(tempfile.mkdtemp(prefix="cuco-snap-tl-"))
    fill_store(home, run_id="demo-20261122-1", n=40)
    db = sqlite3.connect(home / DB_NAME)
    for (cid,) in db.execute("SELECT id FROM candidates").fetchall():
        for config in ("tall", "square"):
            raw = synthetic_records(fused=cid % 4 == 0)  # #40 fused, its parent #38 sequential
            figs = timeline.summarize({config: raw})
            for sql, params in result_rows.timeline_rows(cid, {config: raw}, figs):
                db.execute(sql, params)
    db.commit()
    db.close()
    return CucoApp(home, "demo-20261122-1", settings=TuiSettings(theme="cuco-dark"))


def test_synthetic_records_are_what_the_figures_say():
    # The snapshot's data: the sequential one hides nothing, the fused one nearly all it can.
    seq = timeline.figures(timeline.parse("tall", synthetic_records(False)))
    fused = timeline.figures(timeline.parse("tall", synthetic_records(True)))
    assert seq["overlap_fraction"] < 0.01 and fused["overlap_fraction"] > 0.8


def test_timeline_tab_snapshot(snap_compare):
    pytest.importorskip("pytest_textual_snapshot")

    async def run_before(pilot):
        app = pilot.app
        main = app.screen_stack[0]
        # The window, header and islands load in parallel workers: all of them first (as test_snapshots does).
        assert await until(
            lambda: (
                main.query_one("#candidates").row_count
                and main.query_one("#islands").row_count
                and app.summary.evaluated
            ),
            timeout=60,
            step=0.05,
        )
        await app.workers.wait_for_complete()
        app.query_one("#detail-tabs").active = "tab-timeline"
        app.post_message(CandidateSelected(40))
        view = app.query_one(TimelineView)
        assert await until(lambda: view.candidate_id == 40 and view.mine and view.theirs, timeout=60, step=0.05)
        view.focus()
        await pilot.press("p")
        await app.workers.wait_for_complete()
        await pilot.pause(0.3)
        main.query_one("#candidates").scroll_end(animate=False, immediate=True)
        await pilot.pause(0.3)
        await app.workers.wait_for_complete()

    assert snap_compare(make_app_with_timelines(), terminal_size=(160, 40), run_before=run_before)
