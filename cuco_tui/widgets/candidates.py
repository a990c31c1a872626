"""Candidates of the run: the newest window (SQL pages and filters), updated in place by candidate id.

A line-API widget, not a DataTable: under a stream of events DataTable re-renders every visible cell on
every refresh (its render caches are keyed on a counter that each `update_cell` bumps) and re-lays out
the screen on every added row. Here each row keeps its own rendered line until that row changes, only
visible rows are ever rendered, and an update repaints only the lines it touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from engine.contract import format_speedup

from ..actions import bindings_for
from ..data import CANDIDATE_WINDOW
from ..messages import CandidateSelected

COLUMNS = (
    ("id", "id"),
    ("island", "isl"),
    ("generation", "gen"),
    ("operator", "operator"),
    ("status", "status"),
    ("speedup", "speedup"),
    ("verdict", "verdict"),
    ("mark", "mark"),
)
COLUMN_KEYS = tuple(key for key, _ in COLUMNS)
TRIM_SLACK = 250  # rows beyond the window before the oldest are dropped (in one pass)
STATUS_STYLE = {
    "done": "green",
    "incorrect": "red",
    "failed": "red",
    "refused": "magenta",
    "running": "yellow",
    "pending": "dim",
}
CELL_PADDING = 1  # blank columns either side of a cell, as DataTable draws them
# How the columns give way on a narrow pane (80 columns: the candidates get half), in order, until the row
# fits: the id, the speedup and the verdict never do, and the mark shrinks but keeps its sign (+ accepted,
# x rejected) and a word. ("drop", key) hides a column; ("mark", n) narrows the mark column to n cells.
GIVE_WAY: tuple[tuple[str, Any], ...] = (
    ("drop", "island"),
    ("drop", "generation"),
    ("mark", 12),
    ("drop", "operator"),
    ("drop", "status"),  # the verdict cell then says running / pending itself
    ("mark", 4),
)
ELLIPSIS = "…"
DESCENDING_FIRST = {"speedup", "id", "generation"}  # a first sort by these shows the largest on top
SORT_ARROW = {True: " ▼", False: " ▲"}

Cell = tuple[str, str]  # (text, rich style string; "" for the row's style)


def verdict_of(row: dict[str, Any]) -> str:
    status = row.get("status")
    if status == "done":
        return "review" if row.get("review") == "needs_review" else "ok"  # waits for a person (v)
    if status == "incorrect":
        return "wrong"
    if status == "refused":
        return "refused"  # by the symbol policy: the reason is in the detail
    if status == "failed":
        reason = (row.get("reason") or "").split(":")[0].strip()
        return f"fail {reason}"[:12] if reason else "fail"
    return ""


def mark_of(verdict: str | None, text: str | None) -> Cell:
    if verdict == "accept":
        return f"+ {text or 'accepted'}"[:24], "bold green"
    if verdict == "reject":
        return f"x {text or 'rejected'}"[:24], "bold red"
    return "", ""


def cells_of(row: dict[str, Any]) -> dict[str, Cell]:
    """The cells a (possibly partial) candidate row or event sets, by column key."""
    cells: dict[str, Cell] = {}
    if "id" in row:
        cells["id"] = (str(row["id"]), "")
    if "island" in row:
        cells["island"] = (str(row["island"]), "")
    if "generation" in row:
        cells["generation"] = (str(row["generation"]), "")
    if "operator" in row:
        cells["operator"] = (str(row["operator"]), "")
    if "status" in row:
        cells["status"] = (str(row["status"]), STATUS_STYLE.get(row["status"], ""))
        cells["verdict"] = (verdict_of(row), "")
    if "speedup" in row:
        cells["speedup"] = (format_speedup(row.get("speedup"), row.get("speedup_interval")), "")
    if "mark" in row:
        cells["mark"] = mark_of(row.get("mark"), row.get("mark_text"))
    return cells


def fit_columns(widths: list[int], available: int) -> list[tuple[int, int]]:
    """The columns shown, left to right, as (index into COLUMNS, width): all of them where they fit in
    `available` cells, else fewer by GIVE_WAY; the mark column then takes what room is left, up to its own
    width. Below the last step the row is wider than the pane (the pane scrolls sideways)."""
    pad = 2 * CELL_PADDING
    mark = COLUMN_KEYS.index("mark")
    shown = dict(enumerate(widths))

    def total() -> int:
        return sum(shown.values()) + pad * len(shown)

    for step, arg in GIVE_WAY:
        if total() <= available:
            break
        if step == "drop":
            shown.pop(COLUMN_KEYS.index(arg), None)
        else:
            shown[mark] = min(shown[mark], max(arg, cell_len(COLUMNS[mark][1])))
    shown[mark] = min(widths[mark], shown[mark] + max(0, available - total()))
    return sorted(shown.items())


def clip(text: str, width: int) -> str:
    """`text` in `width` cells: cut with an ellipsis when longer."""
    if cell_len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


@dataclass
class _Row:
    cells: list[Cell]
    lines: dict[str, Strip] = field(default_factory=dict)  # rendered line per look ("cursor", "even", ...)
    generation: int = -1  # the styles/widths those lines were drawn with


class CandidatesTable(ScrollView, can_focus=True):
    """The newest `window` candidates, oldest first, with a row cursor. Line 0 is the column header."""

    BORDER_TITLE = "candidates"
    COMPONENT_CLASSES = {"candidates--header", "candidates--cursor", "candidates--even-row", "candidates--odd-row"}
    # The look of Textual's DataTable (theme variables only, so every theme and 16 colours work).
    DEFAULT_CSS = """
    CandidatesTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .candidates--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .candidates--header { background-tint: $foreground 5%; }
        }
        &:dark > .candidates--even-row { background: $surface-darken-1 40%; }
        & > .candidates--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .candidates--header { background: ansi_bright_blue; color: ansi_default; }
        & > .candidates--even-row { background: $surface-lighten-1 50%; }
        & > .candidates--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    BINDINGS = bindings_for("candidates")

    class SortRequested(Message):
        """The user asked for another order (`s`, `S`, or a click on a column header); None: proposal order.
        The app reloads the table in that order from the store."""

        def __init__(self, sort: tuple[str, bool] | None) -> None:
            super().__init__()
            self.sort = sort

    def __init__(self, window: int = CANDIDATE_WINDOW, **kw: Any) -> None:
        super().__init__(**kw)
        self.window = window
        self.filter_text = ""
        self._order: list[int] = []  # candidate ids, oldest first
        self._rows: dict[int, _Row] = {}
        self._base = 0  # _seq[id] - _base is a row's index (trims shift _base)
        self._seq: dict[int, int] = {}
        self._widths = [cell_len(label) for _, label in COLUMNS]  # each column's widest cell
        self._layout: list[tuple[int, int]] = list(enumerate(self._widths))  # what is shown (fit_columns)
        self._layout_for: tuple[list[int], int] | None = None
        self._cursor = 0
        self._generation = 0  # bumped when styles or widths change: every line is stale
        self._styles: dict[str, Style] | None = None
        self._header: tuple[int, Strip] | None = None
        self._batching = False
        self._follow = False
        self._added = 0
        self._announced: int | None = None  # the candidate the last CandidateSelected named
        self.sort: tuple[str, bool] | None = None  # (column key, descending) of the rows shown; None: proposal order

    # ---- what the app reads

    @property
    def row_count(self) -> int:
        return len(self._order)

    @property
    def cursor_row(self) -> int:
        return self._cursor

    def selected_id(self) -> int | None:
        return self._order[self._cursor] if self._order else None

    def row_ids(self) -> list[int]:
        return list(self._order)

    def row_text(self, candidate_id: int) -> list[str]:
        return [text for text, _ in self._rows[candidate_id].cells]

    def cell_text(self, candidate_id: int, column: str) -> str | None:
        row = self._rows.get(candidate_id)
        return None if row is None else row.cells[COLUMN_KEYS.index(column)][0]

    # ---- loading and updating

    def load(self, rows: list[dict[str, Any]], filter_text: str, sort: tuple[str, bool] | None = None) -> None:
        """Show a fresh result set (the first load, a new filter or a new order)."""
        keep = self.selected_id()
        resorted = sort != self.sort
        self.filter_text = filter_text
        self.sort = sort
        if sort is not None:
            i = COLUMN_KEYS.index(sort[0])
            self._grow(i, (COLUMNS[i][1] + SORT_ARROW[sort[1]], ""))
        self._order, self._rows, self._seq, self._base = [], {}, {}, 0
        for row in rows:
            self._append(row)
        self.border_title = f"candidates  /{filter_text}" if filter_text else "candidates"
        self._restyle()
        self._resize()
        if resorted and sort is not None:
            self.move_cursor(row=0)  # a new order: its top (the best, sorted by speedup)
        elif keep is not None and keep in self._seq:
            self.move_cursor(row=self._index(keep))
        elif sort is not None:
            self.move_cursor(row=0)
        else:
            self.move_cursor(row=max(0, self.row_count - 1))
        if resorted:
            self._header = None
        # Scroll again once laid out: before the first layout the height of the view is not known.
        self.call_after_refresh(self._scroll_to_cursor)
        self.refresh()

    def begin_batch(self) -> None:
        """Before a batch of upserts: remember whether the cursor follows the newest row."""
        self._batching = True
        self._follow = not self._order or self._cursor >= self.row_count - 1
        self._added = 0

    def end_batch(self) -> None:
        """After a batch: trim the window (in bulk, rarely), resize once and move the cursor once."""
        self._batching = False
        if self.row_count > self.window + TRIM_SLACK:
            self._trim_front(self.row_count - self.window)
        if self._added:
            self._resize()
            if self._follow:
                self.move_cursor(row=self.row_count - 1, follow=True)
            self.refresh()
        self._added = 0

    def upsert(self, row: dict[str, Any], add: bool) -> bool:
        """Update the cells of a known candidate; add it at the bottom when `add` (it is new).

        Inside begin_batch()/end_batch() (the app's event batches) the cursor moves, the window is trimmed
        and the size recomputed once per batch; alone, at once.
        """
        cid = int(row["id"])
        known = self._rows.get(cid)
        if known is not None:
            changed = False
            for col, cell in cells_of(row).items():
                i = COLUMN_KEYS.index(col)
                if col != "id" and known.cells[i] != cell:
                    known.cells[i] = cell
                    changed = True
                    self._grow(i, cell)
            if changed:
                known.lines.clear()
                self._refresh_row(self._index(cid))
            return True
        if not add:
            return False
        if not self._batching:
            self.begin_batch()
            self._append(row)
            self._added += 1
            self.end_batch()
        else:
            self._append(row)
            self._added += 1
        return True

    def _append(self, row: dict[str, Any]) -> None:
        cid = int(row["id"])
        cells = cells_of(row)
        values = [cells.get(col, ("", "")) for col in COLUMN_KEYS]
        for i, cell in enumerate(values):
            self._grow(i, cell)
        self._rows[cid] = _Row(values)
        self._seq[cid] = self._base + len(self._order)
        self._order.append(cid)

    def _grow(self, column: int, cell: Cell) -> None:
        """Columns only grow (a narrower value keeps the width: no jumping layout under a stream)."""
        width = cell_len(cell[0])
        if width > self._widths[column]:
            self._widths[column] = width
            self._generation += 1

    def _trim_front(self, n: int) -> None:
        """Drop the `n` oldest rows, keeping the cursor on its candidate and the view where it was."""
        n = min(n, self.row_count)
        if n <= 0:
            return
        for cid in self._order[:n]:
            del self._rows[cid]
            del self._seq[cid]
        del self._order[:n]
        self._base += n
        self._cursor = max(0, self._cursor - n)
        self.scroll_to(y=max(0, self.scroll_y - n), animate=False)
        self.refresh()

    def _index(self, cid: int) -> int:
        return self._seq[cid] - self._base

    def _resize(self) -> None:
        self._fit()
        width = sum(w for _, w in self._layout) + 2 * CELL_PADDING * len(self._layout)
        self.virtual_size = Size(width, self.row_count + 1)

    def _fit(self) -> None:
        """Lay the columns out for the pane's width (again when a column grew or the pane was resized)."""
        key = (list(self._widths), self.scrollable_content_region.width or self.size.width)
        if key == self._layout_for:
            return
        self._layout_for = key
        layout = fit_columns(*key) if key[1] > 0 else list(enumerate(self._widths))
        if layout != self._layout:
            self._layout = layout
            self._generation += 1
            self._header = None

    def on_resize(self, event: events.Resize) -> None:
        self._resize()
        self.refresh()

    # ---- the cursor

    def move_cursor(self, row: int, animate: bool = False, scroll: bool = True, follow: bool = False) -> None:
        """Put the cursor on `row`; `follow`: moved by the stream (tail -f), not by the user."""
        if not self._order:
            self._cursor = 0
            return
        row = max(0, min(row, self.row_count - 1))
        old, self._cursor = self._cursor, row
        if old != row:
            self._refresh_row(old)
            self._refresh_row(row)
        if scroll:
            self._scroll_to_cursor(animate)
        cid = self._order[row]
        if cid != self._announced:
            self._announced = cid
            self.post_message(CandidateSelected(cid, follow=follow))

    def select(self, candidate_id: int) -> bool:
        if candidate_id not in self._seq:
            return False
        self.move_cursor(row=self._index(candidate_id))
        return True

    def _visible_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)  # less the header line

    def _scroll_to_cursor(self, animate: bool = False) -> None:
        top, shown = round(self.scroll_y), self._visible_rows()
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=animate)
        elif self._cursor >= top + shown:
            self.scroll_to(y=self._cursor - shown + 1, animate=animate)

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self._cursor - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self._cursor + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self._cursor - self._visible_rows())

    def action_page_down(self) -> None:
        self.move_cursor(row=self._cursor + self._visible_rows())

    def action_first(self) -> None:
        self.move_cursor(row=0)

    def action_last(self) -> None:
        self.move_cursor(row=self.row_count - 1)

    # ---- sorting (the app reloads the rows in the order asked for)

    def request_sort(self, column: str | None, descending: bool | None = None) -> None:
        if column is None:
            self.post_message(self.SortRequested(None))
            return
        if descending is None:
            descending = column in DESCENDING_FIRST
        self.post_message(self.SortRequested((column, descending)))

    def action_sort_next(self) -> None:
        """Two states: by speedup (the best on top), then back to proposal order. Other columns: a click on
        their header."""
        self.request_sort("speedup" if self.sort is None else None)

    def action_sort_flip(self) -> None:
        if self.sort is not None:
            self.request_sort(self.sort[0], not self.sort[1])

    def column_at(self, x: int) -> str | None:
        """The column key under content column `x` (scrolled)."""
        x += round(self.scroll_x)
        for i, width in self._layout:
            key = COLUMN_KEYS[i]
            width += 2 * CELL_PADDING
            if x < width:
                return key
            x -= width
        return None

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is not None and offset.y == 0:
            column = self.column_at(offset.x)
            if column is not None:  # a second click on the sorted column flips it
                flip = self.sort is not None and self.sort[0] == column
                self.request_sort(column, (not self.sort[1]) if flip and self.sort else None)
            return
        if offset is None or offset.y < 1:
            return
        row = round(self.scroll_y) + offset.y - 1
        if row < self.row_count:
            self.move_cursor(row=row, scroll=False)

    # ---- styles

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._restyle()

    def _on_focus(self, event: events.Focus) -> None:
        super()._on_focus(event)
        self._restyle()

    def _on_blur(self, event: events.Blur) -> None:
        super()._on_blur(event)
        self._restyle()

    def _restyle(self) -> None:
        """Theme, focus or widths changed: every line is drawn again when next shown."""
        self._styles = None
        self._generation += 1
        self.refresh()

    def _looks(self) -> dict[str, Style]:
        if self._styles is None:
            base = self.rich_style
            get = self.get_component_rich_style
            even, odd = base + get("candidates--even-row"), base + get("candidates--odd-row")
            self._styles = {
                "base": base,
                "header": base + get("candidates--header"),
                "even": even,
                "odd": odd,
                "cursor-even": even + get("candidates--cursor"),
                "cursor-odd": odd + get("candidates--cursor"),
            }
        return self._styles

    # ---- rendering

    def _refresh_row(self, index: int) -> None:
        y = index + 1 - round(self.scroll_y)
        if 1 <= y < self.scrollable_content_region.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def _draw(self, cells: list[Cell], look: Style) -> Strip:
        segments = []
        pad = " " * CELL_PADDING
        status, verdict = COLUMN_KEYS.index("status"), COLUMN_KEYS.index("verdict")
        status_hidden = all(i != status for i, _ in self._layout)
        for i, width in self._layout:
            text, style = cells[i]
            if i == verdict and status_hidden and not text:  # running, pending: the verdict cell says so
                text, style = cells[status]
            text = clip(text, width)
            cell_style = look + Style.parse(style) if style else look
            segments.append(Segment(pad, look))
            segments.append(Segment(text + " " * (width - cell_len(text)), cell_style))
            segments.append(Segment(pad, look))
        return Strip(segments)

    def _line_of(self, index: int) -> Strip:
        cid = self._order[index]
        row = self._rows[cid]
        if row.generation != self._generation:
            row.lines.clear()
            row.generation = self._generation
        parity = "even" if index % 2 == 0 else "odd"
        look = f"cursor-{parity}" if index == self._cursor else parity
        line = row.lines.get(look)
        if line is None:
            looks = self._looks()
            style = looks[look]
            if look.startswith("cursor"):
                # The cursor's colours win over a cell's own (as DataTable draws it): readable on any theme.
                cursor = Style(color=style.color, bgcolor=style.bgcolor)
                line = Strip([Segment(s.text, (s.style or Style()) + cursor) for s in self._draw(row.cells, style)])
            else:
                line = self._draw(row.cells, style)
            row.lines[look] = line
        return line

    def _header_cells(self) -> list[Cell]:
        return list(self._header_iter())

    def _header_iter(self) -> Iterable[Cell]:
        for key, label in COLUMNS:
            if self.sort is not None and self.sort[0] == key:
                yield label + SORT_ARROW[self.sort[1]], "bold"
            else:
                yield label, ""

    def render_line(self, y: int) -> Strip:
        self._fit()
        width = self.scrollable_content_region.width
        looks = self._looks()
        scroll_x = round(self.scroll_x)
        if y == 0:
            if self._header is None or self._header[0] != self._generation:
                self._header = (self._generation, self._draw(self._header_cells(), looks["header"]))
            line, fill = self._header[1], looks["header"]
        else:
            index = round(self.scroll_y) + y - 1
            if index >= self.row_count:
                return Strip.blank(width, looks["base"])
            line = self._line_of(index)
            parity = "even" if index % 2 == 0 else "odd"
            fill = looks[f"cursor-{parity}" if index == self._cursor else parity]
        return line.crop(scroll_x, scroll_x + width).extend_cell_length(width, fill)
