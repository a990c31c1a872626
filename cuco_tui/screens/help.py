"""`?`: every key of every screen (under its screen), what it does, the binding id to remap it in
config.yaml (keymap:), and what each number on the screens means.

The keys come from one registry (`key_scopes`): each screen or widget that has keys is listed there once,
and the rows are built from its BINDINGS, so a key added to a screen shows up here by itself.
"""

from __future__ import annotations

import textwrap
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from engine.glossary import GLOSSARY


MEANING_WIDTH = 44   # the action column's width at 80 columns


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss_help", "Close", id="help.close")]

    def __init__(self, bindings: list[tuple[str, str, str, str]], source: str | None) -> None:
        super().__init__()
        self.bindings_list = bindings
        self.source = source

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Keys by screen, then what each number means. Remap: keymap: {binding_id: key} in config.yaml"
                        + (f"\nconfig: {self.source}" if self.source else ""))
            yield DataTable(cursor_type="row", id="help-table")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("screen", "key", "action", "binding id")
        for scope, key, description, binding_id in self.bindings_list:
            table.add_row(scope, key, description, binding_id)
        for name, meaning in GLOSSARY.items():     # every number's unit and meaning, wrapped to stay readable
            for i, line in enumerate(textwrap.wrap(meaning, MEANING_WIDTH)):
                table.add_row("numbers" if i == 0 else "", name if i == 0 else "", line, "")
        table.focus()

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


def key_scopes() -> list[tuple[str, list[Binding]]]:
    """Every screen and widget with keys, as the help lists them (imported here: they import this module's
    neighbours)."""
    from ..app import CucoApp
    from ..widgets.candidates import CandidatesTable
    from ..widgets.llm_panel import StrategiesTable, StrategyModal
    from ..widgets.timeline import TimelineView
    from .insight import ConfigsScreen, LlmScreen
    from .lineage import LineageScreen
    from .modals import ConfirmModal, NoteModal
    from .nodes import NodesScreen
    from .review import ReviewScreen
    from .runs import RunsScreen
    return [("main", CucoApp.BINDINGS), ("candidates", CandidatesTable.BINDINGS),
            ("detail: Timeline", TimelineView.BINDINGS), ("lineage (L)", LineageScreen.BINDINGS),
            ("per config (C)", ConfigsScreen.BINDINGS), ("LLMs (M)", LlmScreen.BINDINGS),
            ("LLMs: strategies", StrategiesTable.BINDINGS), ("new strategy", StrategyModal.BINDINGS),
            ("nodes (n)", NodesScreen.BINDINGS), ("runs (r)", RunsScreen.BINDINGS),
            ("review (v)", ReviewScreen.BINDINGS), ("dialogs", NoteModal.BINDINGS),
            ("confirm", ConfirmModal.BINDINGS), ("help (?)", HelpScreen.BINDINGS)]


def key_names(app: Any, keys: str) -> str:
    """`slash,question_mark` -> `/ ?`: the keys as the footer shows them."""
    return " ".join(app.get_key_display(Binding(k.strip(), "")) for k in keys.split(",") if k.strip())


def describe_bindings(app: Any) -> list[tuple[str, str, str, str]]:
    """(screen, keys, description, id) of every key of every screen, with the user's keymap applied."""
    rows = []
    keymap = getattr(app, "_keymap", {}) or {}
    for scope, bindings in key_scopes():
        for binding in bindings:
            if not isinstance(binding, Binding):
                continue
            keys = keymap.get(binding.id, binding.key) if binding.id else binding.key
            rows.append((scope, key_names(app, keys), binding.description or binding.action, binding.id or ""))
    rows.append(("main", key_names(app, "ctrl+p"), "Command palette", "(built in)"))
    return rows
