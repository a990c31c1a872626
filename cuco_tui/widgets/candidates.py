"""Candidates of the run: the newest window (SQL pages and filters), updated in place by key."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.widgets import DataTable

from ..data import CANDIDATE_WINDOW
from ..messages import CandidateSelected

COLUMNS = (("id", "id"), ("island", "isl"), ("generation", "gen"), ("operator", "operator"),
           ("status", "status"), ("speedup", "speedup"), ("verdict", "verdict"), ("mark", "mark"))
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

    def upsert(self, row: dict[str, Any], add: bool) -> bool:
        """Update the cells of a known candidate; add it at the bottom when `add` (it is new)."""
        key = str(row["id"])
        cells = cells_of(row)
        if key in self.rows:
            for col, value in cells.items():
                if col != "id":
                    self.update_cell(key, col, value, update_width=col in ("speedup", "verdict", "mark", "status"))
            return True
        if not add:
            return False
        at_bottom = self.cursor_row >= self.row_count - 1
        self.add_row(*(cells.get(c, "") for c, _ in COLUMNS), key=key)
        while self.row_count > self.window:
            first = self.coordinate_to_cell_key((0, 0)).row_key
            self.remove_row(first)
        if at_bottom:
            self.move_cursor(row=self.row_count - 1, animate=False)
        return True

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
