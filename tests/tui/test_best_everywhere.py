"""One best everywhere: a rejected candidate and one held for review are not the best in the report, the
printed report's top candidates, `cuco ls`, the TUI header, the islands table or the lineage screen; and the
printed report's numbers agree (the best's time beside its own baseline, every unit in the legend)."""

from __future__ import annotations

import asyncio
import io
import sqlite3
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from cuco_tui.app import CucoApp
from cuco_tui.headless import print_report
from cuco_tui.widgets import CandidatesTable, IslandsTable, RunHeader
from engine.store.store import DB_NAME, ReadStore
from engine.views.insight import config_winners
from engine.views.lineage import best_id
from engine.views.report import build_report
from tests.tui.waiting import until

sys.path.insert(0, str(Path(__file__).parent))
from storefill import fill_store  # noqa: E402

RUN = "best-1"


def _ranked(home: Path) -> list[int]:
    db = sqlite3.connect(home / DB_NAME)
    try:
        return [
            r[0]
            for r in db.execute(
                "SELECT id FROM candidates WHERE run_id=? AND status='done' ORDER BY fitness DESC, id", (RUN,)
            )
        ]
    finally:
        db.close()


def _reject_and_hold(home: Path) -> tuple[int, int, int]:
    """Reject the fastest, hold the second for review: the third is the best."""
    first, second, third = _ranked(home)[:3]
    db = sqlite3.connect(home / DB_NAME)
    db.execute(
        "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
        (RUN, first, "reject", "reads past the buffer", 1.0),
    )
    db.execute("UPDATE candidates SET review='needs_review' WHERE id=?", (second,))
    db.commit()
    db.close()
    return first, second, third


def test_report_and_ls_name_the_same_best(tmp_path):
    fill_store(tmp_path, run_id=RUN, n=40, fork=False)
    rejected, held, best = _reject_and_hold(tmp_path)
    rs = ReadStore(tmp_path)
    try:
        report = build_report(rs, RUN)
        assert report["best"]["candidate"] == best
        assert {c["candidate"] for c in report["best_per_config"]} == {best}
        assert set(config_winners(rs.fetchall, RUN).winners.values()) == {best}  # the per-config view (C)
        out = io.StringIO()
        print_report(report, tmp_path, rs, Console(file=out, width=80))
    finally:
        rs.close()
    text = out.getvalue()
    top = text.split("top candidates")[1].split("design point: what differs")[0]
    ids = [
        int(line.split("│")[1].strip().rstrip("+"))
        for line in top.splitlines()
        if line.startswith("│") and line.split("│")[1].strip().rstrip("+").isdigit()
    ]
    assert ids[0] == best and rejected not in ids and held not in ids, top
    assert f"best       #{best} " in text
    assert f"rejected: #{rejected}: reads past the buffer" in text and f"needs review: #{held} " in text
    # the best's time is shown beside its own baseline (same job), and both units are explained below
    head = " ".join(text.split("top candidates")[0].split())
    assert " ms vs baseline 10.000 ms in its job (sum ratio " in head, head
    for word in ("speedup:", "time:", "baseline:", "bound:", "eff:"):
        assert word in text, word
    assert max(len(line) for line in text.splitlines()) <= 80

    piped = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(tmp_path), "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert max(len(line) for line in piped.splitlines()) <= 80, piped
    assert "…" not in piped, piped  # no header or value cut short
    row = next(line for line in piped.splitlines() if line.lstrip().startswith(RUN))
    assert f" {best} " in row and f" {rejected} " not in row, row


async def test_tui_header_islands_and_lineage_name_the_same_best(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=40, fork=False)
    rejected, held, best = _reject_and_hold(tmp_path)
    rs = ReadStore(tmp_path)
    try:
        rows = {r["id"]: r for r in rs.fetchall("SELECT id, island, speedup FROM candidates WHERE run_id=?", (RUN,))}
        assert best_id(rs.fetchall, RUN) == best
    finally:
        rs.close()
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(120, 40)) as pilot:
        header = app.query_one(RunHeader)
        assert await until(lambda: app.summary.best is not None, 20)
        assert app.summary.best.candidate == best
        await pilot.pause(0.2)
        assert f"#{best}" in str(header.render())
        islands = app.query_one(IslandsTable)
        assert await until(lambda: islands.row_count == 2, 10)
        island = rows[rejected]["island"]
        shown = islands.get_cell(str(island), "best")
        assert shown != f"{rows[rejected]['speedup']:.3f}x", shown
        # the held one's verdict says so (not `ok`)
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.cell_text(held, "verdict") == "review", 10), table.cell_text(held, "verdict")
        await pilot.press("b")
        assert await until(lambda: table.selected_id() == best, 10)
        await pilot.press("L")  # the lineage screen stars the path to the same best
        assert await until(lambda: getattr(getattr(app.screen, "lineage", None), "best", None) == best, 10)
