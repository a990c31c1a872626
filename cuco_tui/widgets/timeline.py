"""The timeline tab of the candidate detail: where the selected candidate's time went in its profiled call.

One block per rank, one lane per thread / stream and per link / copy engine; compute, communication, waits
and idle time in the theme's primary, accent, warning and error colours. Keys (with the tab focused):
`+`/`-` zoom, left/right pan, `0` the whole call, `c` the next config, `p` the parent's timeline beside it on
the same time scale. Read from the store's timelines table (engine/timeline/timeline.py) by a thread worker.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Static

from engine.timeline import timeline as tl

from ..actions import bindings_for
from ..app_api import RunApp

LABEL = 11  # lane label columns
MAX_ZOOM = 4096.0
GLYPHS = {tl.COMPUTE: "█", tl.COMM: "█", tl.WAIT: "░", "idle": "▓"}
HELP = "+/- zoom  ←/→ pan  0 all  c config  p parent"


def palette(theme: Any) -> dict[str, str]:
    """Kind -> colour from the app's theme (a theme without a colour falls back to a terminal colour)."""
    pick = lambda name, fallback: getattr(theme, name, None) or fallback  # noqa: E731
    return {
        tl.COMPUTE: pick("primary", "blue"),
        tl.COMM: pick("accent", "yellow"),
        tl.WAIT: pick("warning", "magenta"),
        "idle": pick("error", "red"),
    }


def _coverage(spans: list[tl.Span], a: float, b: float) -> float:
    return sum(max(0.0, min(y, b) - max(x, a)) for x, y in spans)


def render_config(
    timeline: tl.ConfigTimeline, window: tuple[float, float], width: int, colours: dict[str, str], title: str
) -> Text:
    """Lanes of one config's timeline between window[0] and window[1] (us), `width` columns wide."""
    figs = tl.figures(timeline)
    cells = max(8, width - LABEL - 1)
    t0, t1 = window
    step = max(1e-9, (t1 - t0) / cells)
    frac = figs["overlap_fraction"]
    out = Text()
    out.append(
        f"{title}  overlap {'-' if frac is None else f'{frac:.2f}'}  critical rank {figs['critical_rank']}\n",
        style="bold",
    )
    for rt, rf in zip(timeline.ranks, figs["ranks"]):
        out.append(
            f"rank {rt.rank}: exposed {rf['exposed_comm_ms']:.3f} ms ({100 * rf['exposed_share']:.0f}%)"
            f"  idle {rf['idle_ms']:.3f} ms\n",
            style="dim",
        )
        compute = tl.union((iv.start, iv.end) for iv in rt.intervals if iv.kind == tl.COMPUTE)
        comm = tl.union((iv.start, iv.end) for iv in rt.intervals if iv.kind == tl.COMM)
        idle = tl.subtract([(rt.start, rt.end)], tl.union(compute + comm))
        lanes: dict[str, list[tl.Interval]] = {}
        for iv in rt.intervals:
            lane = f"<{iv.lane}" if iv.args.get("incoming") else iv.lane
            lanes.setdefault(lane, []).append(iv)
        # The rank's own thread or stream first (idle is drawn there), then its links / copy engines, then
        # what lands on it from its peers.
        order = sorted(lanes, key=lambda lane: (lane.startswith("<"), not lane.startswith(("rank", "stream")), lane))
        for n, lane in enumerate(order):
            ivs = lanes[lane]
            out.append(f"{lane[: LABEL - 1]:<{LABEL}}", style="bold" if n == 0 else "")
            by_kind = {
                k: tl.union((iv.start, iv.end) for iv in ivs if iv.kind == k) for k in (tl.COMPUTE, tl.COMM, tl.WAIT)
            }
            if n == 0:
                by_kind["idle"] = idle  # the rank's own lane shows when nothing ran
            for c in range(cells):
                a, b = t0 + c * step, t0 + (c + 1) * step
                cover = {k: _coverage(s, a, b) for k, s in by_kind.items()}
                kind, amount = max(
                    cover.items(), key=lambda kv: (kv[1], kv[0] == "idle")
                )  # idle wins a tie with a wait
                if amount < 0.25 * step:
                    out.append(" ")
                else:
                    out.append(GLYPHS[kind], style=colours[kind])
            out.append("\n")
    left, right = f"{t0 / 1e3:.3f} ms", f"{t1 / 1e3:.3f} ms"
    out.append(" " * LABEL + left + " " * max(1, cells - len(left) - len(right)) + right + "\n", style="dim")
    return out


class TimelineLoaded(Message):
    def __init__(self, candidate_id: int | None, mine: dict, parent: dict, parent_id: int | None) -> None:
        super().__init__()
        self.candidate_id, self.mine, self.theirs, self.parent_id = candidate_id, mine, parent, parent_id


class TimelineView(Vertical, can_focus=True):
    BINDINGS = bindings_for("timeline")
    DEFAULT_CSS = """
    TimelineView { height: auto; }
    TimelineView #timeline-panes { height: auto; }
    TimelineView .timeline-pane { width: 1fr; height: auto; }
    TimelineView #timeline-parent { display: none; border-left: vkey $panel-lighten-2; padding-left: 1; }
    TimelineView.with-parent #timeline-parent { display: block; }
    TimelineView #timeline-help { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.candidate_id: int | None = None
        self.parent_id: int | None = None
        self.mine: dict[str, tl.ConfigTimeline | str] = {}
        self.theirs: dict[str, tl.ConfigTimeline | str] = {}
        self.config_index = 0
        self.zoom = 1.0
        self.center: float | None = None
        self.with_parent = False

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="timeline-help")
        with Horizontal(id="timeline-panes"):
            yield Static("(select a candidate)", id="timeline-mine", classes="timeline-pane")
            yield Static("", id="timeline-parent", classes="timeline-pane")

    # ---- data

    def show_candidate(self, candidate_id: int | None, parent_id: int | None) -> None:
        if candidate_id == self.candidate_id and self.mine:
            return
        self.candidate_id = candidate_id
        if candidate_id is None:
            self.mine, self.theirs = {}, {}
            self.redraw()
            return
        self._load(candidate_id, parent_id)

    @work(thread=True, exclusive=True, group="timeline", exit_on_error=False)
    def _load(self, candidate_id: int, parent_id: int | None) -> None:
        app = self.app
        assert isinstance(app, RunApp)  # the run's app mounts the detail
        mine = app.view.timelines(candidate_id)
        parent = app.view.timelines(parent_id) if parent_id is not None else {}
        self.post_message(TimelineLoaded(candidate_id, mine, parent, parent_id))

    def on_timeline_loaded(self, message: TimelineLoaded) -> None:
        if message.candidate_id != self.candidate_id:
            return
        self.mine, self.theirs, self.parent_id = message.mine, message.theirs, message.parent_id
        self.config_index = min(self.config_index, max(0, len(self.mine) - 1))
        self.redraw()

    # ---- drawing

    @property
    def config(self) -> str | None:
        names = list(self.mine)
        return names[self.config_index % len(names)] if names else None

    def _span(self) -> float:
        config = self.config
        if config is None:
            return 1.0
        ends = [
            rt.end
            for t in (self.mine.get(config), self.theirs.get(config) if self.with_parent else None)
            if isinstance(t, tl.ConfigTimeline)
            for rt in t.ranks
        ]
        return max(ends, default=1.0)

    def window(self) -> tuple[float, float]:
        full = self._span()
        length = full / self.zoom
        center = full / 2 if self.center is None else self.center
        start = min(max(0.0, center - length / 2), max(0.0, full - length))
        return start, start + length

    def redraw(self) -> None:
        if not self.is_mounted:
            return
        mine = self.query_one("#timeline-mine", Static)
        parent = self.query_one("#timeline-parent", Static)
        self.set_class(self.with_parent, "with-parent")
        colours = palette(self.app.current_theme)
        total = max(40, self.size.width or 80)
        width = (total - 2) // 2 if self.with_parent else total
        config = self.config
        if self.candidate_id is None:
            mine.update("(select a candidate)")
        elif config is None:
            mine.update(
                Text(
                    f"#{self.candidate_id} has no timeline (not benchmarked, or measured before "
                    "timelines were recorded)",
                    style="italic",
                )
            )
        else:
            mine.update(
                self._pane(
                    self.mine.get(config),
                    f"#{self.candidate_id} {config} ({self.config_index % len(self.mine) + 1}/{len(self.mine)})",
                    width,
                    colours,
                )
            )
        if self.with_parent:
            if self.parent_id is None:
                parent.update(Text("(no parent: a seed)", style="italic"))
            else:
                parent.update(
                    self._pane(
                        self.theirs.get(config) if config else None,
                        f"parent #{self.parent_id} {config or ''}",
                        width,
                        colours,
                    )
                )

    def _pane(self, timeline: tl.ConfigTimeline | str | None, title: str, width: int, colours: dict) -> Text:
        if timeline is None:
            return Text(f"{title}: no timeline", style="italic")
        if isinstance(timeline, str):
            return Text(f"{title}: {timeline}", style="italic")
        return render_config(timeline, self.window(), width, colours, title)

    def on_resize(self) -> None:
        self.redraw()

    # ---- keys

    def action_zoom(self, factor: float) -> None:
        start, end = self.window()
        self.center = (start + end) / 2
        self.zoom = min(MAX_ZOOM, max(1.0, self.zoom * factor))
        self.redraw()

    def action_pan(self, share: float) -> None:
        start, end = self.window()
        self.center = (start + end) / 2 + share * (end - start)
        start, end = self.window()  # clamped to the call: panning past its end stays there
        self.center = (start + end) / 2
        self.redraw()

    def action_reset(self) -> None:
        self.zoom, self.center = 1.0, None
        self.redraw()

    def action_next_config(self) -> None:
        if self.mine:
            self.config_index = (self.config_index + 1) % len(self.mine)
            self.redraw()

    def action_toggle_parent(self) -> None:
        self.with_parent = not self.with_parent
        self.redraw()
