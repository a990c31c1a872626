"""Runs: every run in the home as a tree (a fork shows under its parent)."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static, Tree

from ..actions import bindings_for
from ..data import StoreView
from ..widgets import KeyFooter


def run_label(run: dict[str, Any], current: str) -> str:
    best = f"{run['best']:.3f}x" if run.get("best") is not None else "-"
    fork = f" from #{run['fork_candidate']}" if run.get("fork_candidate") is not None else ""
    here = "  <- this run" if run["id"] == current else ""
    return f"{run['id']} [{run['state']}] {run.get('candidates', 0)} cand, best {best}{fork}{here}"


def build_forest(runs: list[dict[str, Any]]) -> dict[str | None, list[dict[str, Any]]]:
    ids = {r["id"] for r in runs}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for run in runs:
        parent = run.get("parent_run") if run.get("parent_run") in ids else None
        children.setdefault(parent, []).append(run)
    return children


class RunsScreen(Screen):
    BINDINGS = bindings_for("runs")

    def __init__(self, view: StoreView, run_id: str) -> None:
        super().__init__()
        self.view = view
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield Static("runs and forks (attach to another one with `cuco attach RUN`)", classes="title")
        yield Tree("runs", id="runs-tree")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        runs = self.view.runs()
        self.app.call_from_thread(self.show, runs)

    def show(self, runs: list[dict[str, Any]]) -> None:
        tree = self.query_one(Tree)
        tree.clear()
        children = build_forest(runs)

        def add(node: Any, parent: str | None) -> None:
            for run in children.get(parent, []):
                kids = children.get(run["id"])
                child = node.add(run_label(run, self.run_id), data=run["id"], expand=True, allow_expand=bool(kids))
                if kids:
                    add(child, run["id"])
                else:
                    child.allow_expand = False

        add(tree.root, None)
        tree.root.expand()
