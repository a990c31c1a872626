"""The per-config view (C) and the LLM panel (M), pressed with Pilot on a filled store."""

from __future__ import annotations

import asyncio

from insight_store import RUN, make_insight_store
from textual.widgets import DataTable, Static
from waiting import until

from cuco_tui.app import CucoApp
from cuco_tui.screens.insight import ConfigsScreen, LlmScreen
from cuco_tui.widgets import CandidatesTable


def _rows(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_per_config_view_shows_a_winner_per_config(tmp_path):
    winners = await asyncio.to_thread(make_insight_store, tmp_path)
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(120, 30)) as pilot:
        assert await until(lambda: app.query_one(CandidatesTable).row_count == 40)
        await pilot.press("C")
        assert await until(lambda: isinstance(app.screen, ConfigsScreen) and app.screen.winners is not None)
        screen = app.screen
        assert screen.winners.winners == winners
        rows = {r[0]: r for r in _rows(screen.query_one(DataTable))}
        assert set(rows) == {"#12", "#30"}
        labels = [str(c.label) for c in screen.query_one(DataTable).columns.values()]
        small, large = labels.index("small"), labels.index("large")
        assert rows["#12"][small] == "★ 2.400x" and rows["#12"][large] == "0.900x"
        assert rows["#30"][large] == "★ 1.950x" and rows["#30"][small] == "1.050x"
        title = str(screen.query_one("#configs-title", Static).render())
        assert "small → #12" in title and "large → #30" in title and "no single one wins" in title
        screen.query_one(DataTable).move_cursor(row=list(rows).index("#30"))
        await pilot.press("enter")  # back to the table, on that candidate
        assert await until(
            lambda: not isinstance(app.screen, ConfigsScreen) and app.query_one(CandidatesTable).selected_id() == 30
        )


async def test_llm_panel(tmp_path):
    await asyncio.to_thread(make_insight_store, tmp_path)
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(120, 30)) as pilot:
        assert await until(lambda: app.query_one(CandidatesTable).row_count == 40)
        await pilot.press("M")
        assert await until(lambda: isinstance(app.screen, LlmScreen) and app.screen.panel is not None)
        await pilot.pause(0.1)
        rows = {r[0]: r for r in _rows(app.screen.query_one("#llm-models", DataTable))}
        # model, calls, errors, tokens in, tokens out, cost, pulls, credited, gain/$
        assert rows["fake-model"][1:8] == ["1", "0", "1,200", "300", "0.0125", "1", "1"]
        assert rows["openai:gpt-5-mini"][1:8] == ["2", "1", "6,000", "800", "0.0040", "2", "1"]
        # the bandit's value: mean reward per credited child / (mean cost per pull + its floor)
        assert rows["fake-model"][8] == f"{0.12 / (0.0125 + 0.001):.3g}"
        assert rows["openai:gpt-5-mini"][8] == f"{0.05 / (0.002 + 0.001):.3g}"
        budget = str(app.screen.query_one("#llm-budget", Static).render())
        assert "$0.0165 of $0.02 (82%)" in budget
        advice = str(app.screen.query_one("#llm-advice", Static).render())
        assert "per-chunk flags beat the global barrier" in advice and "after 32 evaluations" in advice
        # strategies: id, text, status, prompts, share, children, faster, failed, mean gain; pinned first
        strategies = _rows(app.screen.query_one("#llm-strategies", DataTable))
        assert [r[0] for r in strategies] == ["s2", "s1", "s3"]
        assert strategies[0][2:] == ["pinned", "2", "25%", "2", "1", "1", "+5.0%"]
        assert strategies[1][2:] == ["active", "3", "38%", "3", "2", "0", "+10.0%"]
        assert strategies[2][2] == "retired"
