"""Snapshots of the main screens at 80x24 from a deterministically filled store (read-only mode)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from snap_app import make_app  # noqa: E402

pytest.importorskip("pytest_textual_snapshot")


async def _settle(pilot) -> None:
    # The window, header and islands load in parallel workers started by the first one: wait for them.
    app = pilot.app
    for _ in range(200):
        await app.workers.wait_for_complete()
        main = app.screen_stack[0]
        if main.query_one("#candidates").row_count and main.query_one("#islands").row_count and app.summary.evaluated:
            break
        await pilot.pause(0.05)
    await pilot.app.workers.wait_for_complete()
    # Whether the horizontal scrollbar was known when the window scrolled to its newest row depends on
    # timing (one row of difference under load): scroll to the end again once everything is laid out.
    await pilot.pause(0.1)
    app.screen_stack[0].query_one("#candidates").scroll_end(animate=False, immediate=True)
    await pilot.pause(0.3)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.2)


def test_main_screen(snap_compare):
    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press("up")
        await pilot.pause(0.4)
        await _settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_main_screen_light_metrics(snap_compare):
    async def run_before(pilot):
        await _settle(pilot)
        pilot.app.query_one("#detail-tabs").active = "tab-metrics"
        await _settle(pilot)

    assert snap_compare(make_app("cuco-light"), terminal_size=(100, 30), run_before=run_before)


def test_runs_screen(snap_compare):
    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press("r")
        await _settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_nodes_screen(snap_compare):
    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press("n")
        await _settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_help_screen(snap_compare):
    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press("question_mark")
        await _settle(pilot)

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_main_screen_100x30(snap_compare):
    """A small terminal: the detail's whole tab bar (short titles) and the caption naming its candidate."""

    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press("up")
        await pilot.pause(0.4)
        await _settle(pilot)

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=run_before)


def test_detail_metrics_100x30(snap_compare):
    """The Metrics tab at 100x30: numbers with units, eff and bound explained below them."""

    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press("up", "up", "right_square_bracket", "right_square_bracket")  # #38: Diff -> Source -> Metrics
        await _settle(pilot)

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=run_before)


def test_diff_with_a_long_changed_line_100x30(snap_compare):
    """A change at the end of a line longer than the pane: the line wraps and the changed characters are
    marked on both its - and + sides."""

    async def run_before(pilot):
        await _settle(pilot)
        await pilot.press("up")
        await _settle(pilot)
        pilot.app.query_one("#detail-diff").parent.scroll_end(animate=False, immediate=True)
        await pilot.pause(0.2)

    assert snap_compare(make_app(long_line=True), terminal_size=(100, 30), run_before=run_before)
