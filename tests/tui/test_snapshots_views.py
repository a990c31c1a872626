"""Snapshots of the lineage screen, the per-config view and the LLM panel, on a deterministically filled store."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from insight_store import RUN, make_insight_store
from test_snapshots import _settle

from cuco_tui.app import CucoApp
from cuco_tui.settings import TuiSettings

pytest.importorskip("pytest_textual_snapshot")


def _app() -> CucoApp:
    home = Path(tempfile.mkdtemp(prefix="cuco-snap-"))
    make_insight_store(home)
    return CucoApp(home, RUN, settings=TuiSettings(theme="cuco-dark"))


async def _open(pilot, key: str, ready) -> None:
    await _settle(pilot)
    await pilot.press(key)
    for _ in range(200):
        if ready(pilot.app.screen):
            break
        await pilot.pause(0.05)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.4)


def test_lineage_screen(snap_compare):
    async def run_before(pilot):
        await _settle(pilot)
        pilot.app.select_candidate(30)
        await pilot.pause(0.3)
        await _open(pilot, "L", lambda s: getattr(s, "diff_for", None) == 30)

    assert snap_compare(_app(), terminal_size=(100, 30), run_before=run_before)


def test_configs_screen(snap_compare):
    async def run_before(pilot):
        await _open(pilot, "C", lambda s: getattr(s, "winners", None) is not None)

    assert snap_compare(_app(), terminal_size=(100, 24), run_before=run_before)


def test_llm_screen(snap_compare):
    async def run_before(pilot):
        await _open(pilot, "M", lambda s: getattr(s, "panel", None) is not None)

    assert snap_compare(_app(), terminal_size=(100, 24), run_before=run_before)
