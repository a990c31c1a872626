"""Two run-wide views, each read by a thread worker when opened (ctrl+r reloads, as on every screen):

- `C` per config: the candidates that win at least one problem config (the Pareto set over configs),
  with every config's speedup; the winning cells are starred, so one design winning small shapes and
  another large ones is plain to see. Enter on a row selects that candidate in the main table.
- `M` LLM panel (widgets/llm_panel.py).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Static

from engine.views.insight import ConfigWinners, LlmPanel

from ..actions import bindings_for
from ..app_api import RunApp
from ..data import StoreView
from ..widgets import KeyFooter
from ..widgets.llm_panel import LlmPanelView


class _RunView(Screen):
    """A screen that reads its data in a thread worker when opened and on R, then shows it."""

    def __init__(self, view: StoreView, run_id: str) -> None:
        super().__init__()
        self.view = view
        self.run_id = run_id

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        data = self.read()
        self.app.call_from_thread(self.show, data)

    def read(self) -> Any:
        raise NotImplementedError

    def show(self, data: Any) -> None:
        raise NotImplementedError


class ConfigsScreen(_RunView):
    AUTO_FOCUS = "#configs-table"
    BINDINGS = bindings_for("configs")

    def __init__(self, view: StoreView, run_id: str) -> None:
        super().__init__(view, run_id)
        self.winners: ConfigWinners | None = None

    def compose(self) -> ComposeResult:
        yield Static(f"best per config in {self.run_id}", id="configs-title", classes="title")
        yield DataTable(id="configs-table", cursor_type="row", zebra_stripes=True)
        yield KeyFooter()

    def read(self) -> ConfigWinners:
        return self.view.config_winners(self.run_id)

    def show(self, data: ConfigWinners) -> None:
        self.winners = data
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns("id", "gen", "isl", "operator", "overall", *data.configs, "wins")
        for row in data.rows:
            cells: list[Any] = [
                f"#{row['id']}",
                str(row["generation"]),
                str(row["island"]),
                row["operator"],
                f"{row['speedup']:.3f}x" if row["speedup"] is not None else "",
            ]
            for config in data.configs:
                value = row["per_config"].get(config)
                won = data.winners.get(config) == row["id"]
                cells.append(
                    Text(
                        ("★ " if won else "") + (f"{value:.3f}x" if value is not None else "-"),
                        style="bold green" if won else "",
                    )
                )
            cells.append(", ".join(row["wins"]))
            table.add_row(*cells, key=str(row["id"]))
        title = Text()
        title.append(f"best per config in {self.run_id}: ", style="bold")
        if not data.configs:
            title.append("no correct candidate with per-config results yet", style="italic")
        title.append("  ".join(f"{c} → #{data.winners[c]}" for c in data.configs if c in data.winners))
        if len(data.rows) > 1:
            title.append(f"   ({len(data.rows)} designs: no single one wins everywhere)", style="yellow")
        self.query_one("#configs-title", Static).update(title)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            app = self.app
            app.pop_screen()
            if isinstance(app, RunApp):
                app.select_candidate(int(event.row_key.value))


class LlmScreen(_RunView):
    BINDINGS = bindings_for("llm")

    def __init__(self, view: StoreView, run_id: str) -> None:
        super().__init__(view, run_id)
        self.panel: LlmPanel | None = None

    def compose(self) -> ComposeResult:
        yield Static(f"LLMs of {self.run_id}", classes="title")
        yield LlmPanelView(id="llm-panel")
        yield KeyFooter()

    def read(self) -> LlmPanel:
        return self.view.llm_panel(self.run_id)

    def show(self, panel: LlmPanel) -> None:
        self.panel = panel
        self.query_one(LlmPanelView).show(panel)
