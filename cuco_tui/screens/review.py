"""The review queue: verified results that wait for a person before they count.

A candidate faster than its workload's overlap bound (or flagged otherwise) is stored but is not the run's
best, a parent or an inspiration until someone accepts it (engine/store/counting.py). Here each one shows its
numbers (per config: baseline, candidate, the bound's parts, the flag) and its diff against its parent;
`a` accepts it (it joins the search), `x` rejects it with a reason.
"""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static

from .. import advice
from ..actions import bindings_for
from ..app_api import RunApp
from ..data import StoreView
from ..widgets import KeyFooter
from .modals import NoteModal, ReasonModal

REVIEW_COLUMNS = ("id", "speedup", "why it waits")


def why_it_waits(flags: list[dict[str, Any]]) -> str:
    beyond = [f for f in flags if f.get("kind") == "beyond_overlap_bound"]
    if beyond:
        f = beyond[0]
        more = f" (+{len(beyond) - 1} configs)" if len(beyond) > 1 else ""
        return f"beat the overlap bound on {f.get('config')}: {f.get('candidate_ms', 0):.4g} < {f.get('bound_ms', 0):.4g} ms{more}"
    return ", ".join(str(f.get("kind", "flagged")) for f in flags) or "flagged"


class ReviewScreen(Screen):
    BINDINGS = bindings_for("review")

    def __init__(self, view: StoreView, run_id: str) -> None:
        super().__init__()
        self.view = view
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield Static(
            f"review queue of {self.run_id}: results that do not count until accepted (a / x)",
            classes="title",
            id="review-title",
        )
        with Horizontal():
            yield DataTable(id="review-table", cursor_type="row")
            with VerticalScroll(id="review-detail"):
                yield Static("", id="review-numbers")
                yield Static("", id="review-diff")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#review-table", DataTable).add_columns(*REVIEW_COLUMNS)
        self.action_reload()

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="review-list", exit_on_error=False)
    def _load(self) -> None:
        rows = self.view.review_queue(self.run_id)
        self.app.call_from_thread(self.show, rows)

    def show(self, rows: list[dict[str, Any]]) -> None:
        table = self.query_one("#review-table", DataTable)
        table.clear()
        for r in rows:
            table.add_row(
                f"#{r['candidate']}", f"{r['speedup'] or 0:.3f}x", why_it_waits(r["flags"]), key=str(r["candidate"])
            )
        if rows:
            self._load_detail(rows[0]["candidate"])  # the cursor's row, before any key is pressed
        else:
            self.query_one("#review-numbers", Static).update("nothing waits for review")
            self.query_one("#review-diff", Static).update("")

    def selected_id(self) -> int | None:
        table = self.query_one("#review-table", DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return int(key) if key is not None else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self._load_detail(int(event.row_key.value))

    @work(thread=True, exclusive=True, group="review-detail", exit_on_error=False)
    def _load_detail(self, candidate_id: int) -> None:
        detail = self.view.detail(candidate_id, dark=self.app.current_theme.dark)
        if detail is not None:
            self.app.call_from_thread(self._show_detail, detail)

    def _show_detail(self, detail: Any) -> None:
        self.query_one("#review-numbers", Static).update(detail.metrics)
        self.query_one("#review-diff", Static).update(detail.diff)

    def _decide(self, op: str, candidate_id: int, **args: Any) -> None:
        app = self.app
        assert isinstance(app, RunApp)  # only the run's app opens the review queue
        app.send_command(op, candidate=candidate_id, **args)
        table = self.query_one("#review-table", DataTable)
        table.remove_row(str(candidate_id))  # decided: it leaves the queue (the store says so on reload)
        if table.row_count == 0:
            self.show([])

    def _need_live(self, what: str, shell: str) -> bool:
        app = self.app
        return not isinstance(app, RunApp) or app.need_live(what, shell)

    def action_accept(self) -> None:
        cid = self.selected_id()
        if cid is None or not self._need_live("accept", advice.accept_command(self.run_id, cid)):
            return

        def done(note: str | None) -> None:
            if note is not None:
                self._decide("accept", cid, note=note or "accepted in the review queue")

        self.app.push_screen(NoteModal(cid), done)

    def action_reject(self) -> None:
        cid = self.selected_id()
        if cid is None or not self._need_live("reject", advice.reject_command(self.run_id, cid)):
            return

        def done(reason: str | None) -> None:
            if reason:
                self._decide("reject", cid, reason=reason)

        self.app.push_screen(ReasonModal(cid), done)
