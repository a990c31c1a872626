"""`?`: every key of every screen (under its screen), what it does, the binding id to remap it in
config.yaml (keymap:), and what each number on the screens means.

The rows come from the registry the screens and widgets build their BINDINGS from (`cuco_tui.actions`),
so a key added there is bound and listed at once.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from engine.glossary import GLOSSARY

from ..actions import SCOPES, actions_in, bindings_for

MEANING_WIDTH = 44  # the widest a meaning's line gets (a wide terminal): a line longer reads badly
DIALOG_WIDTH, DIALOG_SHARE = 80, 0.95  # .dialog's width in themes/cuco.tcss: 80 cells, at most 95 %
DIALOG_FRAME = 2 + 4 + 2  # its border, its padding (2 a side) and the table's scrollbar
CELL_PAD = 2  # a DataTable cell's padding (1 a side)


def meaning_width(screen_width: int, widths: list[int]) -> int:
    """How wide the action column can be for the help dialog on a `screen_width` terminal to show it whole:
    what is left of the dialog after the screen and key columns (`widths`), at most MEANING_WIDTH."""
    dialog = min(DIALOG_WIDTH, int(screen_width * DIALOG_SHARE))
    left = dialog - DIALOG_FRAME - sum(w + CELL_PAD for w in widths) - CELL_PAD
    return max(16, min(MEANING_WIDTH, left))


class HelpScreen(ModalScreen):
    BINDINGS = bindings_for("help")

    def __init__(self, bindings: list[tuple[str, str, str, str]], source: str | None) -> None:
        super().__init__()
        self.bindings_list = bindings
        self.source = source

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(
                "Keys by screen, then what each number means. Remap: keymap: {binding_id: key} in config.yaml"
                + (f"\nconfig: {self.source}" if self.source else "")
            )
            yield DataTable(cursor_type="row", id="help-table")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("screen", "key", "action", "binding id")
        for scope, key, description, binding_id in self.bindings_list:
            table.add_row(scope, key, description, binding_id)
        # every number's unit and meaning, wrapped to what the dialog shows of the action column
        lead = [
            max(cell_len(str(row[col])) for row in [*self.bindings_list, ("screen", "key"), ("numbers", *GLOSSARY)])
            for col in (0, 1)
        ]
        lead[1] = max(lead[1], *(cell_len(name) for name in GLOSSARY))
        width = meaning_width(self.app.size.width, lead)
        for name, meaning in GLOSSARY.items():
            for i, line in enumerate(textwrap.wrap(meaning, width)):
                table.add_row("numbers" if i == 0 else "", name if i == 0 else "", line, "")
        table.focus()

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


def key_names(app: Any, keys: str) -> str:
    """`slash,question_mark` -> `/ ?`: the keys as the footer shows them."""
    return " ".join(app.get_key_display(Binding(k.strip(), "")) for k in keys.split(",") if k.strip())


def describe_bindings(app: Any, keymap: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(screen, keys, description, id) of every key of every screen, with the user's keymap applied."""
    rows = [
        (SCOPES[a.scope], key_names(app, keymap.get(a.id, a.keys)), a.description, a.id)
        for scope in SCOPES
        for a in actions_in(scope)
    ]
    rows.append((SCOPES["main"], key_names(app, "ctrl+p"), "Command palette", "(built in)"))
    return rows
