"""Every key of the TUI, declared once.

Each entry is a bindable action with an id scoped by the screen or widget that takes it (`lineage.best`,
`timeline.zoom_in`); the main screen's keys keep bare ids (`pause`), the names config.yaml already uses.
Screens and widgets build their `BINDINGS` from here with `bindings_for(scope)`, `?` lists the same entries
by scope, and a user's `keymap: {id: keys}` in config.yaml remaps them by id (docs/tui.md, "Keymap and
theme").
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from textual.binding import Binding, BindingType


@dataclass(frozen=True)
class KeyAction:
    id: str  # what config.yaml's keymap: names
    scope: str  # the screen or widget whose BINDINGS carry it (a key of SCOPES)
    keys: str  # the default key(s), Textual's names, comma-separated
    action: str  # the Textual action it runs
    description: str  # what the footer and `?` say
    show: bool = False  # in the footer
    priority: bool = False  # before the focused widget's own keys

    def binding(self) -> Binding:
        return Binding(self.keys, self.action, self.description, show=self.show, priority=self.priority, id=self.id)


# scope -> its title under `?`, in the order `?` lists them
SCOPES: dict[str, str] = {
    "main": "main",
    "candidates": "candidates",
    "timeline": "detail: Timeline",
    "lineage": "lineage (L)",
    "configs": "per config (C)",
    "llm": "LLMs (M)",
    "llm.strategy": "LLMs: strategies",
    "strategy": "new strategy",
    "nodes": "nodes (n)",
    "runs": "runs (r)",
    "review": "review (v)",
    "dialog": "dialogs",
    "confirm": "confirm",
    "help": "help (?)",
}

_A = KeyAction
ACTIONS: tuple[KeyAction, ...] = (
    # main screen; bare ids (the keymap names users already write)
    _A("pause", "main", "space", "toggle_pause", "Pause", show=True),
    _A("pause_hard", "main", "P", "hard_pause", "Hard pause"),
    _A("accept", "main", "a", "accept", "Accept", show=True),
    _A("reject", "main", "x", "reject", "Reject", show=True),
    _A("fork", "main", "f", "fork", "Fork", show=True),
    _A("edit", "main", "e", "edit", "Edit"),
    _A("filter", "main", "slash", "filter", "Filter", show=True),
    _A("best", "main", "b", "jump_to_best", "Best"),
    _A("lineage", "main", "L", "show_lineage", "Lineage"),
    _A("configs", "main", "C", "show_configs", "Per config"),
    _A("llm", "main", "M", "show_llm", "LLMs"),
    _A("nodes", "main", "n", "show_nodes", "Nodes"),
    _A("runs", "main", "r", "show_runs", "Runs"),
    _A("review", "main", "v", "show_review", "Review queue"),
    _A("theme", "main", "t", "toggle_theme", "Theme"),
    _A("pane.islands", "main", "1", "focus_pane('islands')", "Islands"),
    _A("pane.candidates", "main", "2", "focus_pane('candidates')", "Candidates"),
    _A("pane.detail", "main", "3", "focus_pane('detail')", "Detail tabs (then left/right)"),
    _A("detail.prev_tab", "main", "left_square_bracket", "detail_tab(-1)", "Previous detail tab"),
    _A("detail.next_tab", "main", "right_square_bracket", "detail_tab(1)", "Next detail tab"),
    _A("pane.log", "main", "4", "focus_pane('log')", "Log"),
    _A("pane.plot", "main", "5", "show_plot", "Plot"),
    _A("help", "main", "question_mark", "help", "Help", show=True),
    _A("detach", "main", "q", "detach", "Detach", show=True),
    _A("stop", "main", "ctrl+q", "stop_run", "Stop", show=True, priority=True),
    # the candidates table (focused)
    _A("candidates.cursor_up", "candidates", "up", "cursor_up", "Cursor up"),
    _A("candidates.cursor_down", "candidates", "down", "cursor_down", "Cursor down"),
    _A("candidates.page_up", "candidates", "pageup", "page_up", "Page up"),
    _A("candidates.page_down", "candidates", "pagedown", "page_down", "Page down"),
    _A("candidates.first", "candidates", "ctrl+home", "first", "Top"),
    _A("candidates.last", "candidates", "ctrl+end", "last", "Bottom"),
    _A("candidates.home", "candidates", "home", "scroll_home", "Home"),
    _A("candidates.end", "candidates", "end", "scroll_end", "End"),
    _A("candidates.scroll_left", "candidates", "left", "scroll_left", "Scroll left"),
    _A("candidates.scroll_right", "candidates", "right", "scroll_right", "Scroll right"),
    _A("candidates.sort", "candidates", "s", "sort_next", "Sort by speedup / proposal order"),
    _A("candidates.sort_reverse", "candidates", "S", "sort_flip", "Reverse the sort"),
    # the detail's Timeline tab (focused)
    _A("timeline.zoom_in", "timeline", "plus,equals_sign", "zoom(2.0)", "Zoom in", show=True),
    _A("timeline.zoom_out", "timeline", "minus", "zoom(0.5)", "Zoom out", show=True),
    _A("timeline.left", "timeline", "left,h", "pan(-0.25)", "Earlier"),
    _A("timeline.right", "timeline", "right,l", "pan(0.25)", "Later"),
    _A("timeline.reset", "timeline", "0", "reset", "Whole call"),
    _A("timeline.config", "timeline", "c", "next_config", "Config", show=True),
    _A("timeline.parent", "timeline", "p", "toggle_parent", "Parent", show=True),
    # screens over the main one: one key back, ctrl+r reloads
    _A("lineage.back", "lineage", "escape,L,q", "app.pop_screen", "Back", show=True),
    _A("lineage.best", "lineage", "b", "show_best", "Best", show=True),
    _A("configs.back", "configs", "escape,C,q", "app.pop_screen", "Back", show=True),
    _A("configs.reload", "configs", "ctrl+r", "reload", "Reload", show=True),
    _A("llm.back", "llm", "escape,M,q", "app.pop_screen", "Back", show=True),
    _A("llm.reload", "llm", "ctrl+r", "reload", "Reload", show=True),
    _A("llm.strategy.pin", "llm.strategy", "p", "pin", "Pin/unpin", show=True),
    _A("llm.strategy.retire", "llm.strategy", "x", "retire", "Retire", show=True),
    _A("llm.strategy.add", "llm.strategy", "a", "add", "Add strategy", show=True),
    _A("strategy.cancel", "strategy", "escape", "cancel", "Cancel", show=True),
    _A("nodes.back", "nodes", "escape,n,q", "app.pop_screen", "Back", show=True),
    _A("nodes.reload", "nodes", "ctrl+r", "reload", "Reload", show=True),
    _A("runs.back", "runs", "escape,r,q", "app.pop_screen", "Back", show=True),
    _A("runs.reload", "runs", "ctrl+r", "reload", "Reload", show=True),
    _A("review.back", "review", "escape,q", "app.pop_screen", "Back", show=True),
    _A("review.accept", "review", "a", "accept", "Accept", show=True),
    _A("review.reject", "review", "x", "reject", "Reject", show=True),
    _A("review.reload", "review", "ctrl+r", "reload", "Reload", show=True),
    _A("dialog.cancel", "dialog", "escape", "cancel", "Cancel", show=True),
    _A("confirm.no", "confirm", "escape,n", "no", "No", show=True),
    _A("confirm.yes", "confirm", "y", "yes", "Yes", show=True),
    _A("help.close", "help", "escape,question_mark,q", "dismiss_help", "Close", show=True),
)
del _A

BY_ID: dict[str, KeyAction] = {a.id: a for a in ACTIONS}


def actions_in(scope: str) -> list[KeyAction]:
    if scope not in SCOPES:
        raise KeyError(f"no key scope {scope!r}")
    return [a for a in ACTIONS if a.scope == scope]


def bindings_for(scope: str) -> list[BindingType]:
    """A screen's or widget's BINDINGS."""
    return [a.binding() for a in actions_in(scope)]


def keymap_problems(keymap: Mapping[str, str]) -> list[str]:
    """One line per keymap entry that names no action (Textual would ignore it without a word)."""
    problems = []
    for name in keymap:
        if name in BY_ID:
            continue
        near = [i for i in BY_ID if i.endswith("." + name)] or difflib.get_close_matches(name, BY_ID, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        problems.append(f"keymap: no key action {name!r}{hint} (`?` lists the ids)")
    return problems
