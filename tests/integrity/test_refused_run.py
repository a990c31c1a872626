"""A run in which some candidates are refused by the symbol policy goes on: the refused ones are final,
with their reason, counted as evaluated, never parents, and shown by `cuco report` and the TUI (engine and store
real; the executor is the synthetic one, whose objects are real ELF files, some defining clock_gettime)."""

from __future__ import annotations

import io

from rich.console import Console

from cuco_tui.data import StoreView
from cuco_tui.headless import print_report
from cuco_tui.widgets.candidates import verdict_of
from engine.config import RunConfig
from engine.run.engine import Engine
from engine.store.store import ReadStore
from engine.views.report import build_report
from engine.workload import load_workload
from tests.engine.synthetic import SyntheticExecutor


async def test_refused_candidates_are_final_with_their_reason_and_the_run_goes_on(tmp_path):
    ex = SyntheticExecutor(slots=2, refuse_every=3)
    engine = await Engine.create(
        tmp_path, load_workload("demo"), RunConfig(max_evals=30, concurrency=2), run_id="r1", executor=ex
    )
    state = await engine.run()
    await engine.close()
    rs = ReadStore(tmp_path)
    rows = rs.fetchall("SELECT id, status, reason, parent_id FROM candidates WHERE run_id='r1' ORDER BY id")
    refused = [r for r in rows if r["status"] == "refused"]
    assert rows[0]["status"] == "done", "the synthetic rule picked the seed: choose another remainder"
    assert state == "finished" and len(rows) >= 30
    assert refused and any(r["status"] == "done" for r in rows)
    for r in refused:
        assert r["reason"].startswith("refused by the symbol policy: candidate defines `clock_gettime`")
    assert not {r["parent_id"] for r in rows} & {r["id"] for r in refused}
    # nothing of a refused candidate ran: only its build job
    stages = {
        r["stage"] for r in rs.fetchall("SELECT stage FROM evaluations WHERE candidate_id=?", (refused[0]["id"],))
    }
    assert stages == {"build"}
    report = build_report(rs, "r1")
    assert [r["candidate"] for r in report["refused"]] == [r["id"] for r in refused]
    assert report["evaluated"] == len([r for r in rows if r["status"] in ("done", "incorrect", "failed", "refused")])
    out = io.StringIO()
    print_report(report, tmp_path, rs, Console(file=out, width=200))
    assert f"refused: #{refused[0]['id']}: refused by the symbol policy" in out.getvalue()
    rs.close()
    # the TUI's candidates table and detail pane
    view = StoreView(tmp_path)
    try:
        shown = {r["id"]: r for r in view.candidates("r1")}
        assert all(verdict_of(shown[r["id"]]) == "refused" for r in refused)
        assert "candidate defines `clock_gettime`" in view.detail(refused[0]["id"]).metrics.plain
    finally:
        view.close()
