"""Islands: size, best speedup, a sparkline of recent speedups, the last migration into it."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from ..data import sparkline

COLUMNS = (("island", "isl"), ("size", "size"), ("best", "best"), ("trend", "trend"), ("migration", "last migration"))


class IslandsTable(DataTable):
    BORDER_TITLE = "islands"

    def __init__(self, **kw: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, show_cursor=False, **kw)

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, islands: list[dict[str, Any]]) -> None:
        """Add new islands, update the cells of known ones (never clear())."""
        for row in islands:
            key = str(row["island"])
            cells = {
                "island": str(row["island"]),
                "size": str(row["size"]),
                "best": f"{row['best']:.3f}x" if row.get("best") is not None else "-",
                "trend": sparkline(row.get("trend") or []),
                "migration": row.get("migration") or "",
            }
            if key in self.rows:
                for col, value in cells.items():
                    if self.get_cell(key, col) != value:
                        self.update_cell(key, col, value, update_width=True)
            else:
                self.add_row(*(cells[c] for c, _ in COLUMNS), key=key)
