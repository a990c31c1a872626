"""Nodes: GPU and CPU slots, running jobs, health."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Static

from remote.slurm_commands import explain_reason

from ..actions import bindings_for
from ..data import StoreView
from ..widgets import KeyFooter

NODE_COLUMNS = ("node", "health", "gpus busy", "cpus busy", "jobs", "failures", "detail")


def pending_text(nodes: list[dict[str, Any]]) -> str:
    """Why a scheduler's jobs wait, most common reason first, each with what it means for the user."""
    lines = []
    for n in nodes:
        for reason, count in sorted((n.get("pending") or {}).items(), key=lambda kv: -kv[1]):
            lines.append(f"{n.get('name', '?')}: {count} pending for {reason}: {explain_reason(reason)}")
    return "\n".join(lines)


class NodesScreen(Screen):
    BINDINGS = bindings_for("nodes")

    def __init__(self, view: StoreView, run_id: str) -> None:
        super().__init__()
        self.view = view
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield Static(f"nodes of {self.run_id}", classes="title")
        yield DataTable(id="nodes-table", cursor_type="row")
        yield Static("", id="pending-reasons")  # a scheduler's pending reasons; hidden when there are none
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

    def show(self, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]] | None) -> None:
        """Nodes, and the running jobs (None: keep the jobs shown; a node update says nothing of them)."""
        table = self.query_one("#nodes-table", DataTable)
        for n in nodes:
            health = "quarantined" if n.get("quarantined") else ("ok" if n.get("healthy", True) else "down")
            cells = (
                n.get("name", "?"),
                health,
                f"{n.get('gpus_busy', 0)}/{n.get('gpus_total', 0)}",
                f"{n.get('cpu_busy', 0)}/{n.get('cpu_slots', 0)}",
                str(n.get("running_jobs", 0)),
                str(n.get("failures", 0)),
                str(n.get("detail", ""))[:40],
            )
            key = str(n.get("name"))
            if key in table.rows:
                for col, value in zip(table.columns, cells):
                    table.update_cell(key, col, value)
            else:
                table.add_row(*cells, key=key)
        pending = self.query_one("#pending-reasons", Static)
        text = pending_text(nodes)
        pending.update(text)
        pending.display = bool(text)
        if jobs is None:
            return
        queue = {job: state for n in nodes for job, state in (n.get("queue") or {}).items()}
        jt = self.query_one("#jobs-table", DataTable)
        jt.clear()
        for j in jobs[:500]:
            node = j.get("node") or ""
            if j["id"] in queue:  # a scheduler's job: its queue state (and why it waits)
                node = f"{node} {queue[j['id']]}".strip()
            jt.add_row(j["id"], j["stage"], node, str(j["attempts"]), str(j["candidate_id"]))

    def update_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """The engine's node states (every 5 s while live): the nodes now, and the jobs read again."""
        self.show(nodes, None)
        self._load()
