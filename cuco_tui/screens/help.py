"""`?`: every key, what it does, and the binding id to remap it in config.yaml (keymap:)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss_help", "Close", id="help.close")]

    def __init__(self, bindings: list[tuple[str, str, str]], source: str | None) -> None:
        super().__init__()
        self.bindings_list = bindings
        self.source = source

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Keys (remap with keymap: {binding_id: key} in config.yaml)"
                        + (f"\nconfig: {self.source}" if self.source else ""))
            yield DataTable(cursor_type="row", id="help-table")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("key", "action", "binding id")
        for key, description, binding_id in self.bindings_list:
            table.add_row(key, description, binding_id)
        table.focus()

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


def describe_bindings(app: Any) -> list[tuple[str, str, str]]:
    """(key, description, id) for the app's bindings, with the user's keymap applied."""
    rows = []
    keymap = getattr(app, "_keymap", {}) or {}
    from ..widgets.candidates import CandidatesTable     # its own keys (sorting) are the user's to remap too
    for binding in [*app.BINDINGS, *CandidatesTable.BINDINGS]:
        if not isinstance(binding, Binding) or not binding.id:
            continue
        key = keymap.get(binding.id, binding.key)
        rows.append((key, binding.description or binding.action, binding.id))
    rows.append(("ctrl+p", "Palette", "(built in)"))
    return rows
