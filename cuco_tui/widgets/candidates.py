"""Candidates of the run: the newest window (SQL pages and filters), updated in place by key."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual._two_way_dict import TwoWayDict
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets._data_table import CellKey

from ..data import CANDIDATE_WINDOW
from ..messages import CandidateSelected

COLUMNS = (("id", "id"), ("island", "isl"), ("generation", "gen"), ("operator", "operator"),
           ("status", "status"), ("speedup", "speedup"), ("verdict", "verdict"), ("mark", "mark"))
TRIM_SLACK = 250     # rows beyond the window before the oldest are dropped (in one pass)
STATUS_STYLE = {"done": "green", "incorrect": "red", "failed": "red", "running": "yellow", "pending": "dim"}


def verdict_of(row: dict[str, Any]) -> str:
    status = row.get("status")
    if status == "done":
        return "ok"
    if status == "incorrect":
        return "wrong"
    if status == "failed":
        reason = (row.get("reason") or "").split(":")[0].strip()
        return f"fail {reason}"[:12] if reason else "fail"
    return ""


def mark_of(verdict: str | None, text: str | None) -> Text:
    if verdict == "accept":
        return Text(f"+ {text or 'accepted'}"[:24], style="bold green")
    if verdict == "reject":
        return Text(f"x {text or 'rejected'}"[:24], style="bold red")
    return Text("")


def cells_of(row: dict[str, Any]) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    if "id" in row:
        cells["id"] = str(row["id"])
    if "island" in row:
        cells["island"] = str(row["island"])
    if "generation" in row:
        cells["generation"] = str(row["generation"])
    if "operator" in row:
        cells["operator"] = str(row["operator"])
    if "status" in row:
        cells["status"] = Text(str(row["status"]), style=STATUS_STYLE.get(row["status"], ""))
        cells["verdict"] = verdict_of(row)
    if "speedup" in row:
        cells["speedup"] = f"{row['speedup']:.3f}x" if row.get("speedup") is not None else ""
    if "mark" in row:
        cells["mark"] = mark_of(row.get("mark"), row.get("mark_text"))
    return cells


class CandidatesTable(DataTable):
    BORDER_TITLE = "candidates"

    def __init__(self, window: int = CANDIDATE_WINDOW, **kw: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self.window = window
        self.filter_text = ""

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def load(self, rows: list[dict[str, Any]], filter_text: str) -> None:
        """Show a fresh result set (the first load, or a new filter)."""
        keep = self.selected_id()
        self.filter_text = filter_text
        if self.row_count:
            self.clear(columns=False)
        for row in rows:
            cells = cells_of(row)
            self.add_row(*(cells.get(c, "") for c, _ in COLUMNS), key=str(row["id"]))
        self.border_title = f"candidates  /{filter_text}" if filter_text else "candidates"
        if self.row_count:
            if keep is not None and str(keep) in self.rows:
                self.move_cursor(row=self.get_row_index(str(keep)), animate=False)
            else:
                self.move_cursor(row=self.row_count - 1, animate=False)
                # Once laid out (scrollbars known), show the newest row fully whatever the timing.
                self.call_after_refresh(self.scroll_end, animate=False)

    def begin_batch(self) -> None:
        """Before a batch of upserts: remember whether the cursor follows the newest row."""
        self._follow = self.row_count == 0 or self.cursor_row >= self.row_count - 1
        self._added = 0

    def end_batch(self) -> None:
        """After a batch: trim the window (in bulk, rarely) and move the cursor once."""
        if self.row_count > self.window + TRIM_SLACK:
            self._trim_front(self.row_count - self.window)
        if self._added and getattr(self, "_follow", False):
            self.move_cursor(row=self.row_count - 1, animate=False)
        self._added = 0

    def upsert(self, row: dict[str, Any], add: bool) -> bool:
        """Update the cells of a known candidate; add it at the bottom when `add` (it is new).

        Inside begin_batch()/end_batch() (the app's event batches) the cursor moves and the window is
        trimmed once per batch; alone, at once.
        """
        key = str(row["id"])
        cells = cells_of(row)
        if key in self.rows:
            for col, value in cells.items():
                if col != "id":
                    # Grow-only widths: DataTable re-measures the whole column (every row) when an updated
                    # cell is narrower than its column, so ask for a width update only when it is wider.
                    width = value.cell_len if isinstance(value, Text) else cell_len(str(value))
                    self.update_cell(key, col, value, update_width=width > self.columns[col].content_width)
            return True
        if not add:
            return False
        batched = hasattr(self, "_added")
        if not batched:
            self.begin_batch()
        self.add_row(*(cells.get(c, "") for c, _ in COLUMNS), key=key)
        self._added += 1
        if not batched:
            self.end_batch()
            del self._added
        return True

    def _trim_front(self, n: int) -> None:
        """Drop the `n` oldest rows in one pass. DataTable.remove_row is O(rows) per row with two
        watcher round trips (17 ms at 1,000 rows); this is one O(rows) pass for all of them."""
        n = min(n, self.row_count)
        if n <= 0:
            return
        locations = self._row_locations
        doomed = [locations.get_key(i) for i in range(n)]
        for row_key in doomed:
            for column_key in self._data.get(row_key, {}):
                self._updated_cells.discard(CellKey(row_key, column_key))
            del self.rows[row_key]
            del self._data[row_key]
        self._row_locations = TwoWayDict({row_key: locations.get(row_key) - n for row_key in list(locations)
                                          if locations.get(row_key) >= n})
        self._require_update_dimensions = True
        self._update_count += 1
        row, column = self.cursor_coordinate
        self.cursor_coordinate = Coordinate(max(0, row - n), column)
        self.hover_coordinate = Coordinate(max(0, self.hover_coordinate.row - n), self.hover_coordinate.column)
        self.check_idle()
        self.refresh(layout=True)

    def selected_id(self) -> int | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:  # noqa: BLE001 - an empty or shrinking table
            return None
        return int(key.value) if key.value is not None else None

    def select(self, candidate_id: int) -> bool:
        key = str(candidate_id)
        if key not in self.rows:
            return False
        self.move_cursor(row=self.get_row_index(key), animate=False)
        return True

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self.post_message(CandidateSelected(int(event.row_key.value)))
