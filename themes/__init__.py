"""Textual themes and the stylesheet the cuco TUI loads.

Pick one with `theme:` in config.yaml, the `CUCO_THEME` environment variable, the command palette
("Theme: ...") or the `t` key. Any built-in Textual theme name works too (e.g. `textual-ansi` for a
terminal's own 16 colours).
"""

from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

THEMES_DIR = Path(__file__).resolve().parent
APP_CSS = THEMES_DIR / "cuco.tcss"

CUCO_DARK = Theme(
    name="cuco-dark",
    primary="#5FAFD7",
    secondary="#87AF87",
    accent="#FFAF5F",
    warning="#FFD75F",
    error="#FF5F5F",
    success="#5FD75F",
    foreground="#D0D0D0",
    background="#121212",
    surface="#1C1C1C",
    panel="#262626",
    dark=True,
)

CUCO_LIGHT = Theme(
    name="cuco-light",
    primary="#005F87",
    secondary="#5F8700",
    accent="#AF5F00",
    warning="#AF8700",
    error="#D70000",
    success="#008700",
    foreground="#1C1C1C",
    background="#FAFAFA",
    surface="#EEEEEE",
    panel="#E4E4E4",
    dark=False,
)

THEMES = (CUCO_DARK, CUCO_LIGHT)
DEFAULT_DARK = CUCO_DARK.name
DEFAULT_LIGHT = CUCO_LIGHT.name
