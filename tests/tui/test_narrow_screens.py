"""The TUI at the sizes people have: 80x24 and 100x30. The candidates pane is half the width there: its
columns give way by priority (island, generation, operator, status), so a speedup keeps three significant
figures and every verdict and mark stays readable; the `?` explanations wrap inside the dialog. Snapshots
of the main screen and `?` at both sizes, on a run with a result held for review, an accepted and a
rejected candidate and a speedup of two digits before the point."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

sys.path.insert(0, str(Path(__file__).parent))

from snap_app import ACCEPTED, REJECTED, REVIEWED, TENFOLD, make_app  # noqa: E402

from cuco_tui.screens import HelpScreen  # noqa: E402
from cuco_tui.widgets.candidates import CandidatesTable  # noqa: E402
from engine.glossary import GLOSSARY  # noqa: E402

pytest.importorskip("pytest_textual_snapshot")

SIZES = [(80, 24), (100, 30)]


async def _settle(pilot) -> None:
    app = pilot.app
    for _ in range(200):
        await app.workers.wait_for_complete()
        main = app.screen_stack[0]
        if main.query_one("#candidates").row_count and main.query_one("#islands").row_count and app.summary.evaluated:
            break
        await pilot.pause(0.05)
    await pilot.pause(0.3)
    await app.workers.wait_for_complete()
    await pilot.pause(0.2)


def _shown(table: CandidatesTable) -> dict[str, str]:
    """Each visible row's text as drawn on the screen (the pane's width, unscrolled), by candidate id."""
    width = table.scrollable_content_region.width
    rows = {}
    for y in range(1, table.scrollable_content_region.height):
        text = table.render_line(y).text
        assert cell_len(text) == width
        first = text.split()
        if first and first[0].isdigit():
            rows[first[0]] = text
    return rows


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_the_candidates_pane_keeps_speedups_verdicts_and_marks(size):
    app = await asyncio.to_thread(make_app, marked=True)  # the store is filled with asyncio.run of its own
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        table = app.screen_stack[0].query_one(CandidatesTable)
        header = table.render_line(0).text.split()
        assert header[:2] == ["id", "speedup"] and "verdict" in header and "mark" in header, header
        rows = _shown(table)
        assert {str(c) for c in (REVIEWED, ACCEPTED, TENFOLD)} <= set(rows), rows
        assert "review" in rows[str(REVIEWED)].split()  # whole, not `re`
        assert "12.3x" in rows[str(TENFOLD)].split()  # three significant figures, not `1` or `12.345x`
        assert "+ clean" in rows[str(ACCEPTED)]
        for cid, text in rows.items():
            speedup = table.cell_text(int(cid), "speedup")
            if speedup:
                assert speedup in text.split(), (speedup, text)
                digits = speedup.rstrip("x").replace(".", "").lstrip("0")
                assert len(digits) == 3, speedup
        if str(REJECTED) in rows:
            assert "x reads" in rows[str(REJECTED)]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_help_explanations_wrap_inside_the_dialog(size):
    app = await asyncio.to_thread(make_app, marked=True)  # the store is filled with asyncio.run of its own
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one("#help-table")
        visible = table.scrollable_content_region.width
        words = []
        for row in range(table.row_count):
            screen, key, action, _ = (str(c) for c in table.get_row_at(row))
            if screen == "numbers" or (not screen and not key):
                words.append(action)
                # the action column ends inside what the dialog shows, with the cell's padding
                lead = sum(table.columns[k].get_render_width(table) for k in list(table.columns)[:2])
                assert lead + cell_len(action) + 2 <= visible, (action, lead, visible)
        assert " ".join(" ".join(words).split()) == " ".join(" ".join(GLOSSARY.values()).split())


async def _still(pilot) -> None:
    """No scroll or cursor animation left running, and every pending refresh drawn."""
    await pilot.wait_for_scheduled_animations()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.2)


def _after(keys: list[str], to_numbers: bool = False):
    async def run_before(pilot) -> None:
        await _settle(pilot)
        # the candidates table at its end, its cursor two rows above the newest, set rather than pressed:
        # a refresh that lands after a key press would leave the cursor (and the scroll) where timing put it
        candidates = pilot.app.screen_stack[0].query_one(CandidatesTable)
        # (twice: a refresh landing after the first would change the table's height under it)
        for _ in range(2):
            candidates.move_cursor(row=candidates.row_count - 3, animate=False)
            await _still(pilot)
            candidates.scroll_end(animate=False, immediate=True)
            await _still(pilot)
        for key in keys:
            await pilot.press(key)
            await _still(pilot)
        if to_numbers:  # the help's cursor on the first explanation of a number
            table = pilot.app.screen.query_one("#help-table")
            first = next(r for r in range(table.row_count) if str(table.get_row_at(r)[0]) == "numbers")
            # wrapped rows get their heights after a refresh: the cursor is set first, the table scrolled home,
            # and only then is the cursor scrolled into view, from a known place with every height known
            table.move_cursor(row=first + 6, animate=False, scroll=False)
            await _still(pilot)
            table.scroll_home(animate=False, immediate=True)
            await _still(pilot)
            table.move_cursor(row=first + 6, animate=False)
            await _still(pilot)
        pilot.app.clear_notifications()  # the review toast's timeout would race the snapshot
        await _still(pilot)

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_main_screen_marked(snap_compare, size):
    assert snap_compare(make_app(marked=True), terminal_size=size, run_before=_after([]))


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_help_screen_marked(snap_compare, size):
    assert snap_compare(
        make_app(marked=True), terminal_size=size, run_before=_after(["question_mark"], to_numbers=True)
    )
