"""Detail tabs of the selected candidate: diff, source, metrics, logs, LLM, plot, timeline, lineage."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static, TabbedContent, TabPane

from .scoreplot import ScorePlot
from .timeline import TimelineView

TABS = (("diff", "Diff"), ("source", "Source"), ("metrics", "Metrics"), ("logs", "Logs"), ("llm", "LLM"),
        ("plot", "Plot"), ("timeline", "Timeline"), ("lineage", "Lineage"))


TEXT_TABS = ("diff", "source", "metrics", "logs", "llm", "lineage")


class DetailTabs(Vertical):
    """Only the visible tab is filled when a detail arrives; another is filled when it is opened (each fill
    re-lays out the screen and renders a highlighted source, too dear to do five times per selection)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._detail: Any = None
        self._stale: set[str] = set()

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="tab-diff", id="detail-tabs"):
            for key, title in TABS:
                with TabPane(title, id=f"tab-{key}"):
                    if key == "plot":
                        yield ScorePlot(id="score-plot")
                    elif key == "timeline":
                        yield TimelineView(id="timeline-view")
                    else:
                        with VerticalScroll():
                            yield Static("(select a candidate)", id=f"detail-{key}", classes="detail-body")

    @property
    def active(self) -> str:
        return self.query_one(TabbedContent).active

    @active.setter
    def active(self, value: str) -> None:
        self.query_one(TabbedContent).active = value

    def show(self, detail: Any) -> None:
        self._detail = detail
        self._stale = set(TEXT_TABS) | {"timeline"}
        self._fill(self.active.removeprefix("tab-"))
        if detail is not None:
            self.border_title = detail.title

    def _fill(self, key: str) -> None:
        if key not in self._stale:
            return
        self._stale.discard(key)
        if key == "timeline":    # read from the store by the tab itself, when it is shown
            row = getattr(self._detail, "row", None) or {}
            self.query_one(TimelineView).show_candidate(row.get("id"), row.get("parent_id"))
            return
        body = "(no such candidate)" if self._detail is None else getattr(self._detail, key)
        self.query_one(f"#detail-{key}", Static).update(body)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id:
            self._fill(event.pane.id.removeprefix("tab-"))
