"""The LLM panel: per model its calls, tokens, cost and errors, the bandit's pulls and its estimate of
improvement per dollar; the budget used; the meta-summarizer's current advice; the run's mutation
strategies with their children, successes and mean gain, which the operator steers from the strategies
table: `p` pins (or unpins) the selected strategy, `x` retires it, `a` adds one (each an operator mark,
sent to the live engine like accept and reject)."""

from __future__ import annotations

import asyncio
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.coordinate import Coordinate
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Label, Static

from engine.views.insight import LlmPanel

from ..actions import bindings_for
from ..app_api import RunApp

COLUMNS = ("model", "calls", "errors", "tokens in", "tokens out", "cost $", "pulls", "credited", "gain/$")
STRATEGY_COLUMNS = ("id", "strategy", "status", "prompts", "share", "children", "faster", "failed", "mean gain")
MARK_TIMEOUT_S = 30.0
TEXT_CELL = 34  # characters of a strategy in its row; the selected one is shown whole below the table


class StrategyModal(ModalScreen):
    """The text of a new strategy. Returns it, or None when cancelled."""

    BINDINGS = bindings_for("strategy")

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("A new strategy: what to try and why (one sentence)")
            yield Input(placeholder="e.g. pipeline the dispatch per expert", id="strategy-text")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Add", variant="success", id="ok")

    @on(Input.Submitted)
    @on(Button.Pressed, "#ok")
    def _ok(self) -> None:
        text = self.query_one("#strategy-text", Input).value.strip()
        self.dismiss(text or None)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class StrategiesTable(DataTable):
    BINDINGS = bindings_for("llm.strategy")

    def __init__(self, **kw: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self.pinned: dict[str, bool] = {}
        self.records: dict[str, dict[str, Any]] = {}

    def selected(self) -> str | None:
        if not self.pinned or self.cursor_row < 0:
            return None
        key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        return key if key in self.pinned else None

    def action_pin(self) -> None:
        sid = self.selected()
        if sid is None:
            self.app.notify("pin: select a strategy first", severity="warning")
            return
        self.mark("unpin" if self.pinned[sid] else "pin", sid)

    def action_retire(self) -> None:
        sid = self.selected()
        if sid is None:
            self.app.notify("retire: select a strategy first", severity="warning")
            return
        self.mark("retire", sid, "retired in the LLM panel")

    def action_add(self) -> None:
        if not self._can_mark("add"):  # said before the dialog, not after the text is typed
            return

        def done(text: str | None) -> None:
            if text:
                self.mark("add", None, text)

        self.app.push_screen(StrategyModal(), done)

    def _can_mark(self, verdict: str) -> bool:
        app = self.app
        return not isinstance(app, RunApp) or app.need_live(f"strategy {verdict}")

    def mark(self, verdict: str, sid: str | None, text: str = "") -> None:
        if self._can_mark(verdict):
            self._send(verdict, sid, text)

    @work(group="strategy-mark", exit_on_error=False)
    async def _send(self, verdict: str, sid: str | None, text: str) -> None:
        client = getattr(self.app, "client", None)
        if client is None:
            self.app.notify(f"strategy {verdict}: no live engine", severity="error")
            return
        try:
            await asyncio.wait_for(client.request("strategy", verdict=verdict, strategy=sid, text=text), MARK_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the engine's answer (or its absence) is the operator's to read
            self.app.notify(f"strategy {verdict} failed: {exc}", severity="error", timeout=8)
            return
        self.app.notify(f"strategy {verdict}: {sid or text[:40]}")
        reload = getattr(self.screen, "action_reload", None)
        if reload is not None:
            reload()


class LlmPanelView(Vertical):
    DEFAULT_CSS = """
    LlmPanelView #llm-models { height: auto; max-height: 60%; }
    LlmPanelView #llm-budget { margin: 1 0 0 0; }
    LlmPanelView #llm-advice { margin: 1 0 0 0; }
    LlmPanelView #llm-strategies { height: auto; max-height: 40%; margin: 1 0 0 0; }
    """

    def compose(self) -> ComposeResult:
        yield DataTable(id="llm-models", cursor_type="row", zebra_stripes=True)
        yield Static("", id="llm-budget")
        yield Static("strategies (p pin/unpin, x retire, a add)", id="llm-strategies-title", classes="title")
        yield StrategiesTable(id="llm-strategies")
        yield Static("", id="llm-strategy-detail")
        yield Static("", id="llm-advice")

    def on_mount(self) -> None:
        self.query_one("#llm-models", DataTable).add_columns(*COLUMNS)
        self.query_one(StrategiesTable).add_columns(*STRATEGY_COLUMNS)

    def show(self, panel: LlmPanel) -> None:
        table = self.query_one("#llm-models", DataTable)
        table.clear()
        for m in panel.models:
            gain = "-" if m.gain_per_usd is None else f"{m.gain_per_usd:.3g}"
            table.add_row(
                m.model,
                str(m.calls),
                str(m.errors),
                f"{m.input_tokens:,}",
                f"{m.output_tokens:,}",
                f"{m.cost_usd:.4f}",
                str(m.pulls),
                str(m.rewarded),
                gain,
                key=m.model,
            )
        if not panel.models:
            table.add_row("(no LLM calls in this run: the design-space mutator needs none)", *[""] * 8)
        budget = Text()
        budget.append("budget ", style="bold")
        if panel.budget_usd:
            share = panel.spent_usd / panel.budget_usd
            budget.append(
                f"${panel.spent_usd:.4f} of ${panel.budget_usd:.2f} ({share:.0%})",
                style="bold red" if share >= 0.9 else "",
            )
        else:
            budget.append(f"${panel.spent_usd:.4f} spent, no budget set (--budget-usd)")
        budget.append("\ngain/$: the bandit's mean speedup gain per call over its mean cost per call", style="dim")
        self.query_one("#llm-budget", Static).update(budget)
        advice = Text()
        advice.append("meta-summarizer's advice", style="bold underline")
        if panel.advice_at is not None:
            advice.append(f" (after {panel.advice_at} evaluations)", style="dim")
        advice.append("\n")
        for item in panel.advice or ["(none yet)"]:
            advice.append(f"• {item}\n")
        self.query_one("#llm-advice", Static).update(advice)
        self._show_strategies(panel.strategies)

    def _show_strategies(self, rows: list[dict[str, Any]]) -> None:
        table = self.query_one(StrategiesTable)
        selected = table.selected()
        table.clear()
        table.pinned = {r["id"]: bool(r["pinned"]) for r in rows}
        table.records = {r["id"]: r for r in rows}
        for r in rows:
            status = Text(
                "pinned" if r["pinned"] else r["status"],
                style="bold green" if r["pinned"] else ("" if r["status"] == "active" else "dim"),
            )
            gain = "-" if r["mean_gain"] is None else f"{r['mean_gain']:+.1%}"
            text = r["text"] if len(r["text"]) <= TEXT_CELL else r["text"][: TEXT_CELL - 1] + "…"
            table.add_row(
                r["id"],
                Text(text, style="" if r["status"] == "active" else "dim strike"),
                status,
                str(r["pulls"]),
                f"{r['share']:.0%}",
                str(r["children"]),
                str(r["successes"]),
                str(r["failures"]),
                gain,
                key=r["id"],
            )
        if not rows:
            table.add_row("", "(no strategies: the LLM mutator seeds them at its first proposal)", *[""] * 7)
        elif selected in table.pinned:
            table.move_cursor(row=table.get_row_index(selected))
        self._show_detail(table.selected())

    @on(DataTable.RowHighlighted, "#llm-strategies")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(event.row_key.value if event.row_key is not None else None)

    def _show_detail(self, sid: str | None) -> None:
        row = self.query_one(StrategiesTable).records.get(sid or "")
        detail = Text()
        if row is not None:
            detail.append(f"{row['id']}: ", style="bold")
            detail.append(row["text"])
            detail.append(f"\n{row['origin']}" + (f"; {row['why']}" if row.get("why") else ""), style="dim")
        self.query_one("#llm-strategy-detail", Static).update(detail)
