"""The LLM panel: per model its calls, tokens, cost and errors, the bandit's pulls and its estimate of
improvement per dollar; the budget used; the meta-summarizer's current advice."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ..insight_data import LlmPanel

COLUMNS = ("model", "calls", "errors", "tokens in", "tokens out", "cost $", "pulls", "credited", "gain/$")


class LlmPanelView(Vertical):
    DEFAULT_CSS = """
    LlmPanelView #llm-models { height: auto; max-height: 60%; }
    LlmPanelView #llm-budget { margin: 1 0 0 0; }
    LlmPanelView #llm-advice { margin: 1 0 0 0; }
    """

    def compose(self) -> ComposeResult:
        yield DataTable(id="llm-models", cursor_type="row", zebra_stripes=True)
        yield Static("", id="llm-budget")
        yield Static("", id="llm-advice")

    def on_mount(self) -> None:
        self.query_one("#llm-models", DataTable).add_columns(*COLUMNS)

    def show(self, panel: LlmPanel) -> None:
        table = self.query_one("#llm-models", DataTable)
        table.clear()
        for m in panel.models:
            gain = "-" if m.gain_per_usd is None else f"{m.gain_per_usd:.3g}"
            table.add_row(m.model, str(m.calls), str(m.errors), f"{m.input_tokens:,}", f"{m.output_tokens:,}",
                          f"{m.cost_usd:.4f}", str(m.pulls), str(m.rewarded), gain, key=m.model)
        if not panel.models:
            table.add_row("(no LLM calls in this run: the design-space mutator needs none)", *[""] * 8)
        budget = Text()
        budget.append("budget ", style="bold")
        if panel.budget_usd:
            share = panel.spent_usd / panel.budget_usd
            budget.append(f"${panel.spent_usd:.4f} of ${panel.budget_usd:.2f} ({share:.0%})",
                          style="bold red" if share >= 0.9 else "")
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
