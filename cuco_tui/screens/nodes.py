"""Nodes: GPU and CPU slots, running jobs, health."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ..widgets import KeyFooter

NODE_COLUMNS = ("node", "health", "gpus busy", "cpus busy", "jobs", "failures", "detail")


class NodesScreen(Screen):
    BINDINGS = [Binding("escape,n,q", "app.pop_screen", "Back", id="nodes.back"),
                Binding("r", "reload", "Reload", id="nodes.reload")]

    def __init__(self, view: Any, run_id: str) -> None:
        super().__init__()
        self.view = view
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield Static(f"nodes of {self.run_id}", classes="title")
        yield DataTable(id="nodes-table", cursor_type="row")
        yield Static("running jobs", classes="title")
        yield DataTable(id="jobs-table", cursor_type="row")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#nodes-table", DataTable).add_columns(*NODE_COLUMNS)
        self.query_one("#jobs-table", DataTable).add_columns("job", "stage", "node", "attempts", "candidate")
        self.action_reload()

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        nodes = self.view.nodes()
        jobs = self.view.jobs(self.run_id)
        self.app.call_from_thread(self.show, nodes, jobs)

    def show(self, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
        table = self.query_one("#nodes-table", DataTable)
        for n in nodes:
            health = "quarantined" if n.get("quarantined") else ("ok" if n.get("healthy", True) else "down")
            cells = (n.get("name", "?"), health, f"{n.get('gpus_busy', 0)}/{n.get('gpus_total', 0)}",
                     f"{n.get('cpu_busy', 0)}/{n.get('cpu_slots', 0)}", str(n.get("running_jobs", 0)),
                     str(n.get("failures", 0)), str(n.get("detail", ""))[:40])
            key = str(n.get("name"))
            if key in table.rows:
                for col, value in zip(table.columns, cells):
                    table.update_cell(key, col, value)
            else:
                table.add_row(*cells, key=key)
        jt = self.query_one("#jobs-table", DataTable)
        jt.clear()
        for j in jobs[:500]:
            jt.add_row(j["id"], j["stage"], j.get("node") or "", str(j["attempts"]), str(j["candidate_id"]))

    def update_nodes(self, nodes: list[dict[str, Any]]) -> None:
        self.show(nodes, [])
