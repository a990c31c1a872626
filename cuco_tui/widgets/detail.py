"""Detail tabs of the selected candidate: diff, source, metrics, logs, LLM, plot, timeline, lineage."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static, TabbedContent, TabPane, Tabs

from .scoreplot import ScorePlot
from .timeline import TimelineView

TABS = (
    ("diff", "Diff"),
    ("source", "Source"),
    ("metrics", "Metrics"),
    ("logs", "Logs"),
    ("llm", "LLM"),
    ("plot", "Plot"),
    ("timeline", "Timeline"),
    ("lineage", "Lineage"),
)


SHORT_TITLES = {"source": "Src", "metrics": "Metr", "timeline": "Time", "lineage": "Line"}
TEXT_TABS = ("diff", "source", "metrics", "logs", "llm", "lineage")

# The first line of each tab: which candidate it shows, and what (a tab never leaves that to guess).
CAPTIONS = {
    "diff": "#{id}: its change against {parent}",
    "source": "#{id}: its source",
    "metrics": "#{id}: its measurements (units and meanings at the bottom)",
    "logs": "#{id}: its build and run logs",
    "llm": "#{id}: the LLM calls that made it",
    "lineage": "#{id}: its ancestors and children (live)",
}


def captioned(key: str, detail: Any) -> Text:
    row = getattr(detail, "row", None) or {}
    parent = row.get("parent_id") if row.get("parent_id") is not None else row.get("origin_id")
    caption = CAPTIONS[key].format(id=detail.id, parent=f"its parent #{parent}" if parent is not None else "(none)")
    out = Text(caption + "\n", style="bold")
    body = getattr(detail, key)
    if isinstance(body, Text):
        out.append_text(body)
        out.no_wrap, out.overflow = body.no_wrap, body.overflow
    else:
        out.append(str(body))
    return out


class DetailTabs(Vertical):
    """Only the visible tab is filled when a detail arrives; another is filled when it is opened (each fill
    re-lays out the screen and renders a highlighted source, too dear to do five times per selection)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._detail: Any = None
        self._stale: set[str] = set()

    def on_mount(self) -> None:
        self.border_title = "detail  [ ] tabs"

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
        # which candidate, and how to reach the other tabs (`[`/`]`, or `3` then left/right)
        self.border_title = f"detail of #{detail.id}  [ ] tabs" if detail is not None else "detail  [ ] tabs"

    def _fill(self, key: str) -> None:
        if key not in self._stale:
            return
        self._stale.discard(key)
        if key == "timeline":  # read from the store by the tab itself, when it is shown
            row = getattr(self._detail, "row", None) or {}
            self.query_one(TimelineView).show_candidate(row.get("id"), row.get("parent_id"))
            return
        if self._detail is None:
            self.query_one(f"#detail-{key}", Static).update("(no such candidate)")
            return
        self.query_one(f"#detail-{key}", Static).update(captioned(key, self._detail))

    def set_compact(self, compact: bool) -> None:
        """Short tab titles (a narrow terminal): the whole tab bar stays visible."""
        tabbed = self.query_one(TabbedContent)
        for key, title in TABS:
            tabbed.get_tab(f"tab-{key}").label = SHORT_TITLES.get(key, title) if compact else title

    def focus_tabs(self) -> None:
        """The tab bar takes the focus: left/right switch tabs."""
        self.query_one(Tabs).focus()

    def next_tab(self, step: int) -> None:
        keys = [f"tab-{key}" for key, _ in TABS]
        self.active = keys[(keys.index(self.active) + step) % len(keys)]

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id:
            self._fill(event.pane.id.removeprefix("tab-"))
