"""`L`: how a candidate came about. Its ancestors back to generation 0 (the spine, seed first), then its
descendants as a tree opened one level at a time; each line shows the operator and mutator that made the
node, its speedup and the change over its parent, its inspirations and migrations. Nodes on the path from
the seed to the run's best carry a star; `b` shows the best's own lineage. The highlighted node's diff
against its parent is shown beside the tree.

Everything is read in thread workers through engine.views.lineage (lazy: usable at 100,000 candidates):
the newest 500 ancestors first (enter on "older ancestors" reads more), children when a node is opened,
and the stars once the best's path is known (walked once per best, in its own worker).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static, Tree

from engine.views.lineage import ANCESTORS_SHOWN, Lineage, LineageNode

from ..actions import bindings_for
from ..data import StoreView
from ..lineage_view import node_label
from ..widgets import KeyFooter

DIFF_DEBOUNCE_S = 0.15
OLDER = "older"  # the data of the tree line that reads older ancestors


class LineageScreen(Screen):
    BINDINGS = bindings_for("lineage")
    DEFAULT_CSS = """
    LineageScreen #lineage-body { height: 1fr; }
    LineageScreen #lineage-tree { width: 3fr; border: round $primary; }
    LineageScreen #lineage-diff-box { width: 2fr; border: round $secondary; }
    """

    def __init__(self, view: StoreView, run_id: str, candidate_id: int | None) -> None:
        super().__init__()
        self.view = view
        self.run_id = run_id
        self.focus_id = candidate_id
        self.limit = ANCESTORS_SHOWN
        self.lineage: Lineage | None = None
        self.best_marked = False  # the stars of the path to the best are drawn
        self.diff_for: int | None = None  # the candidate whose diff is shown
        self._diff_timer: Any = None

    def compose(self) -> ComposeResult:
        yield Static(f"lineage in {self.run_id}", id="lineage-title", classes="title")
        with Horizontal(id="lineage-body"):
            tree: Tree[LineageNode] = Tree("lineage", id="lineage-tree")
            tree.show_root = False
            tree.auto_expand = False
            tree.guide_depth = 2
            yield tree
            with VerticalScroll(id="lineage-diff-box"):
                yield Static("(highlight a node: its diff against its parent)", id="lineage-diff")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(Tree).focus()
        if self.focus_id is None:
            self.action_show_best()
        else:
            self._load(self.focus_id)

    # ---- loading

    @work(thread=True, exclusive=True, group="lineage", exit_on_error=False)
    def _load(self, candidate_id: int) -> None:
        data = self.view.lineage(self.run_id, candidate_id, self.limit, with_best_path=False)
        self.app.call_from_thread(self._show, data)
        self.view.mark_best_path(self.run_id, data)
        self.app.call_from_thread(self._mark_best, data)

    @work(thread=True, exclusive=True, group="lineage", exit_on_error=False)
    def _load_best(self) -> None:
        best = self.view.best_id(self.run_id)
        if best is None:
            self.app.call_from_thread(self.notify, "lineage: no correct candidate yet", severity="warning")
            return
        self.limit = ANCESTORS_SHOWN
        data = self.view.lineage(self.run_id, best, self.limit)
        self.app.call_from_thread(self._show, data)
        self.app.call_from_thread(self._mark_best, data)

    @work(thread=True, group="lineage-children", exit_on_error=False)
    def _load_children(self, node: Any) -> None:
        parent: LineageNode = node.data
        kids = self.view.lineage_children(self.run_id, parent)
        self.app.call_from_thread(self._show_children, node, parent, kids)

    @work(thread=True, exclusive=True, group="lineage-diff", exit_on_error=False)
    def _load_diff(self, candidate_id: int) -> None:
        diff = self.view.parent_diff(candidate_id, dark=self.app.current_theme.dark)
        self.app.call_from_thread(self._show_diff, candidate_id, diff)

    # ---- showing

    def _show(self, data: Lineage) -> None:
        with self.app.batch_update():  # one repaint for the whole tree
            self._fill(data)

    def _fill(self, data: Lineage) -> None:
        self.lineage = data
        self.best_marked = False
        self.focus_id = data.focus
        tree = self.query_one(Tree)
        tree.clear()
        if not data.chain:
            tree.root.add_leaf(f"(no candidate #{data.focus})")
            return
        self._title(data)
        if not data.complete:
            tree.root.add_leaf(Text(f"… older ancestors (enter reads {ANCESTORS_SHOWN} more)", style="dim"), data=OLDER)
        focus_node = None
        for node in data.chain:  # the spine: one line per ancestor, seed first
            if node.id == data.focus:
                focus_node = tree.root.add(
                    node_label(node, focus=True), data=node, expand=True, allow_expand=bool(node.children)
                )
            else:
                tree.root.add_leaf(node_label(node), data=node)
        if focus_node is not None:
            self._show_children(focus_node, data.chain[-1], data.children)
            # once the tree's lines exist (they are built on refresh): the cursor on the focus, its diff shown
            self.call_after_refresh(tree.move_cursor, focus_node, animate=False)

    def _title(self, data: Lineage) -> None:
        title = Text()
        back = "back to generation 0" if data.complete else "shown; older ones above"
        title.append(f"#{data.focus}: {len(data.chain) - 1} ancestors {back}", style="bold")
        if data.best is not None:
            on_path = sum(1 for n in data.chain if n.on_best_path)
            title.append(f"   ★ the path to the best #{data.best}: {on_path} of these on it", style="yellow")
        self.query_one("#lineage-title", Static).update(title)

    def _mark_best(self, data: Lineage) -> None:
        """The best's path is known: star the lines on it (the tree was drawn without waiting for it)."""
        if data is not self.lineage:
            return
        stack = list(self.query_one(Tree).root.children)
        with self.app.batch_update():
            while stack:
                node = stack.pop()
                # drawn without stars: relabel only the lines on the path (mark_best_path set their flag)
                if isinstance(node.data, LineageNode) and node.data.id in data.best_path:
                    node.data.on_best_path = True
                    node.set_label(node_label(node.data, focus=node.data.id == data.focus))
                stack.extend(node.children)
            self._title(data)
        self.best_marked = True

    def _show_children(self, tree_node: Any, parent: LineageNode, kids: list[LineageNode]) -> None:
        tree_node.remove_children()
        for kid in kids:
            tree_node.add(node_label(kid), data=kid, allow_expand=bool(kid.children))
        if parent.children > len(kids):
            tree_node.add_leaf(
                Text(f"… {parent.children - len(kids)} more (the best {len(kids)} by speedup are shown)", style="dim")
            )
        tree_node.expand()

    def _schedule_diff(self, candidate_id: int) -> None:
        if self._diff_timer is not None:
            self._diff_timer.stop()
        self._diff_timer = self.set_timer(DIFF_DEBOUNCE_S, lambda: self._load_diff(candidate_id))

    def _show_diff(self, candidate_id: int, diff: Text) -> None:
        self.diff_for = candidate_id
        box = self.query_one("#lineage-diff-box", VerticalScroll)
        box.border_title = f"#{candidate_id} vs its parent"
        self.query_one("#lineage-diff", Static).update(diff)

    # ---- events and keys

    @on(Tree.NodeExpanded)
    def _expanded(self, event: Tree.NodeExpanded) -> None:
        node = event.node
        data = node.data
        if isinstance(data, LineageNode) and data.children and not node.children:
            self._load_children(node)

    @on(Tree.NodeHighlighted)
    def _highlighted(self, event: Tree.NodeHighlighted) -> None:
        if isinstance(event.node.data, LineageNode):
            self._schedule_diff(event.node.data.id)

    @on(Tree.NodeSelected)
    def _selected(self, event: Tree.NodeSelected) -> None:
        """enter: the lineage of that node instead (space opens a node's children in place)."""
        data = event.node.data
        if data == OLDER and self.focus_id is not None:
            self.limit += ANCESTORS_SHOWN
            self._load(self.focus_id)
        elif isinstance(data, LineageNode) and data.id != self.focus_id:
            self.limit = ANCESTORS_SHOWN
            self._load(data.id)

    def action_show_best(self) -> None:
        self._load_best()
