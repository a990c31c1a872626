"""The command palette (ctrl+p) of a run: a candidate typed there is selected in the table, and the runs
entry opens the runs screen."""

from __future__ import annotations

import asyncio

from storefill import fill_store
from waiting import until

from cuco_tui.app import CucoApp
from cuco_tui.screens import RunsScreen
from cuco_tui.widgets import CandidatesTable

RUN = "pal-1"


async def _choose(pilot, text: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.pause(0.2)
    for ch in text:
        await pilot.press(ch if ch != " " else "space")
    await pilot.pause(1.0)  # the providers search in the background
    await pilot.press("down", "enter")


async def test_a_candidate_chosen_in_the_palette_is_selected(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=30)
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count == 30)
        first, label = app.palette_candidates()[0]
        assert app.selected_id != first
        await _choose(pilot, f"candidate {label}")
        assert await until(lambda: app.selected_id == first), app.selected_id


async def test_the_runs_entry_opens_the_runs_screen(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=5)
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(160, 40)) as pilot:
        assert await until(lambda: app.query_one(CandidatesTable).row_count == 5)
        await _choose(pilot, "runs: show runs")
        assert await until(lambda: isinstance(app.screen, RunsScreen)), app.screen
