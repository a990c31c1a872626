"""Detail tabs of the selected candidate: diff, source, metrics, logs, LLM, plot."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static, TabbedContent, TabPane

from .scoreplot import ScorePlot

TABS = (("diff", "Diff"), ("source", "Source"), ("metrics", "Metrics"), ("logs", "Logs"), ("llm", "LLM"),
        ("plot", "Plot"))


class DetailTabs(Vertical):
    def compose(self) -> ComposeResult:
        with TabbedContent(initial="tab-diff", id="detail-tabs"):
            for key, title in TABS:
                with TabPane(title, id=f"tab-{key}"):
                    if key == "plot":
                        yield ScorePlot(id="score-plot")
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
        if detail is None:
            for key, _ in TABS[:-1]:
                self.query_one(f"#detail-{key}", Static).update("(no such candidate)")
            return
        for key in ("diff", "source", "metrics", "logs", "llm"):
            self.query_one(f"#detail-{key}", Static).update(getattr(detail, key))
        self.border_title = detail.title
