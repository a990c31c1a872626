"""The cuco TUI: a client of one run's engine (live over its socket, or the store read-only).

Data flow: thread workers query the store (`StoreView`) and post typed messages; one async worker reads
the engine socket and posts `EngineEvents` batches (~50 ms, flushed on a lull); the app applies each
batch inside `batch_update()`, updating table cells by key. Commands go back over the socket from
workers that report with `CommandDone`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.timer import Timer
from textual.widgets import Input, Log, Static, TabbedContent
from textual.worker import Worker, WorkerState

from engine.contract import (
    ArchiveCell,
    Best,
    CandidateAdded,
    CandidateStatus,
    Envelope,
    Fork,
    LlmCall,
    Mark,
    Migration,
    Recommendations,
    Result,
    RunState,
    RunSummary,
    Strategies,
    StrategyMark,
    decode,
)
from engine.contract import Log as LogEvent  # textual's Log is the engine-log widget
from themes import APP_CSS, DEFAULT_DARK, DEFAULT_LIGHT, THEMES

from . import advice
from .actions import bindings_for
from .client import EngineClient, EngineEnded, EngineError, EngineGone, one_request
from .commands import CandidatesProvider, NodesProvider, RunsProvider, ThemesProvider
from .data import FilterError, StoreView, parse_filter
from .launch import spawn_daemon, wait_for_daemon
from .messages import (
    CandidateSelected,
    CandidatesLoaded,
    CommandDone,
    DetailLoaded,
    EngineConnected,
    EngineEndedRun,
    EngineEvents,
    EngineLost,
    ScoresLoaded,
    SummaryLoaded,
)
from .screens import (
    ConfirmModal,
    ForkModal,
    ForkRequest,
    HelpScreen,
    NodesScreen,
    NoteModal,
    ReasonModal,
    ReviewScreen,
    RunsScreen,
)
from .screens.help import describe_bindings
from .screens.insight import ConfigsScreen, LlmScreen
from .screens.lineage import LineageScreen
from .settings import TuiSettings
from .toasts import Toast, ToastWatcher
from .widgets import CandidatesTable, DetailTabs, IslandsTable, KeyFooter, RunHeader, ScorePlot

LOG_LINES = 2000
REFRESH_S = 1.0  # header/islands/plot recomputed from the store at most this often ...
REFRESH_COST_FACTOR = 4  # ... and at most every 4x what the last refresh cost (a big store under load)
DETAIL_DEBOUNCE_S = 0.12  # the user moved the cursor: show its detail as soon as the keys pause
DETAIL_FOLLOW_S = 1.0  # the stream moved it (or changed the selected one): at most once a second
EVENT_BATCH_S = 0.2  # events applied at most 5 times a second: each batch re-renders the visible table
TERMINAL_STATES = ("stopped", "finished", "failed")
SIGNAL_GRACE_S = 3.0  # after SIGTERM, the app has this long to end by itself
ENGINE_ACTIONS = ("toggle_pause", "hard_pause", "accept", "reject", "fork", "stop_run")
MAIN_SCREEN_ACTIONS = ("filter", "edit", "jump_to_best", "focus_pane", "detail_tab", "show_plot")
COMPACT_BELOW = 120  # columns: below this the detail pane takes half the width, with short tab titles
NODES_POLL_S = 5.0  # live: the engine's node states asked for this often (a node lost or quarantined)


def _ui_guard(handler: Any) -> Any:
    """Drop a message that arrives while the app shuts down (its widgets are gone)."""

    @functools.wraps(handler)
    def wrapper(self: Any, message: Any) -> None:
        try:
            handler(self, message)
        except NoMatches:
            if self.is_running and self.screen_stack:
                raise

    return wrapper


def _hms(ts: float | None) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts or 0))


def event_line(envelope: Envelope) -> str | None:
    """One log line for an event (None: not worth a line)."""
    e = envelope.event
    if isinstance(e, LogEvent):
        text = f"{e.level or 'info'}: {e.message or ''}"
    elif isinstance(e, RunState):
        text = f"run {e.state}" + (f" ({e.reason})" if e.reason else "")
    elif isinstance(e, Result):
        sp = f" {e.speedup:.3f}x" if e.speedup is not None else ""
        why = f" {e.reason}" if e.reason else ""
        text = f"#{e.id} {e.status}{sp}{why}"
    elif isinstance(e, Best):
        text = f"new best #{e.id} {e.speedup or 0:.3f}x"
    elif isinstance(e, Mark):
        text = f"#{e.id} {e.verdict}" + (f": {e.text}" if e.text else "")
    elif isinstance(e, Fork):
        text = f"forked {e.new_run}" + (f" from #{e.from_candidate}" if e.from_candidate else "")
    elif isinstance(e, Migration):
        text = f"migration #{e.id} island {e.src} -> {e.dst}"
    elif isinstance(e, LlmCall):
        text = f"llm {e.model} ${float(e.cost_usd or 0):.4f}"
    elif isinstance(e, StrategyMark):
        text = f"strategy {e.strategy or ''} {e.verdict}".replace("  ", " ") + (f": {e.text}" if e.text else "")
    elif isinstance(e, Strategies):
        changes = [
            f"{what} {', '.join(getattr(e, what))}" for what in ("retired", "rewritten", "added") if getattr(e, what)
        ]
        text = "strategies: " + "; ".join(changes)
    elif isinstance(e, Recommendations):
        items = [str(i) for i in e.items or []]
        text = "advice: " + " | ".join(items) if items else "advice: (none)"
    else:
        return None
    return f"{_hms(envelope.ts)} {text}"


def decoded(events: list[dict[str, Any]]) -> list[Envelope]:
    """Events as the contract's records (a kind from a newer cuco is skipped)."""
    return [e for e in map(decode, events) if e is not None]


class CucoApp(App):
    """Watch and steer one run."""

    TITLE = "cuco"
    CSS_PATH = str(APP_CSS)
    COMMANDS = App.COMMANDS | {CandidatesProvider, RunsProvider, NodesProvider, ThemesProvider}
    BINDINGS = bindings_for("main")

    def __init__(
        self,
        home: Path,
        run_id: str,
        socket_path: str | None = None,
        settings: TuiSettings | None = None,
        since: int | None = None,
    ):
        super().__init__()
        self.home = Path(home)
        self.run_id = run_id
        self.socket_path = socket_path
        self.settings = settings or TuiSettings()
        self.view = StoreView(self.home)
        self.live = False
        self.client: EngineClient | None = None
        self.summary = RunSummary(run=run_id, workload="", state="")
        self.filter_text = ""
        self.sort: tuple[str, bool] | None = None  # the candidates table's order; None: proposal order
        self.selected_id: int | None = None
        self.detail: Any = None
        self._since = since
        self._dirty = False
        self._filter_dirty = False
        self._summary_busy = False
        self._summary_next = 0.0
        self._candidates_busy = False
        self._candidates_next = 0.0
        self._detail_timer: Timer | None = None
        self._pending_detail: int | None = None
        self._keys_state: tuple[bool, Any] = (False, None)  # (live, state) the footer was drawn for
        self._parents: dict[int, int] = {}  # child -> parent, of the candidates announced while attached
        self._forking = 0  # forks asked for by this TUI and not answered yet ...
        self._own_forks: set[str] = set()  # ... and those answered: their event gets no second toast
        self.events_applied = 0
        self.detached = False
        self.ended: tuple[str, str] | None = None  # (state, reason) once the engine said the run ended
        self.toasts = ToastWatcher()
        self._best_wanted: int | None = None  # `b` reloads the table to find the best: select it then
        self._status_next = 0.0
        for theme in THEMES:
            self.register_theme(theme)

    @property
    def _main(self) -> Any:
        """The main screen (queries must not hit a modal on top of it)."""
        if not self.screen_stack:
            raise NoMatches("the app is shutting down")
        return self.screen_stack[0]

    # ---- layout

    def compose(self) -> ComposeResult:
        yield Static("", id="banner")
        yield RunHeader(id="header")
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield IslandsTable(id="islands")
                yield Input(
                    placeholder="filter: status=done island=1 speedup>1.2 op~llm mark=accept  "
                    "(Enter applies, empty clears)",
                    id="filter",
                )
                yield CandidatesTable(id="candidates")
            with Vertical(id="right"):
                yield DetailTabs(id="detail")
        log = Log(max_lines=LOG_LINES, id="engine-log", auto_scroll=True)
        log.border_title = "engine log"
        yield log
        # Compact: every shown key fits in 80 columns (over SSH); the palette hint only where there is room.
        yield KeyFooter(id="footer")

    def on_resize(self, event: Any) -> None:
        if not self.screen_stack:
            return
        for footer in self._main.query("#footer").results(KeyFooter):
            footer.show_command_palette = event.size.width >= 100
        # narrow: the detail gets half the width and short tab titles
        compact = event.size.width < COMPACT_BELOW
        self._main.set_class(compact, "compact")
        for tabs in self._main.query(DetailTabs):
            tabs.set_compact(compact)

    def on_mount(self) -> None:
        theme = self.settings.theme or os.environ.get("TEXTUAL_THEME") or DEFAULT_DARK
        if theme not in self.available_themes:
            self.notify(f"theme {theme!r} is unknown; using {DEFAULT_DARK}", severity="warning")
            theme = DEFAULT_DARK
        self.theme = theme
        if self.settings.keymap:
            self.set_keymap(self.settings.keymap)
        for problem in self.settings.problems:
            self.notify(problem, severity="warning")
        self._main.query_one(CandidatesTable).focus()
        self._set_banner(None if self.socket_path else advice.read_only_banner(self.run_id, self.summary.state))
        self._initial_load()
        self.set_interval(REFRESH_S / 4, self._tick)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):  # asked to end (or the terminal went): end, surely
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._end_on_signal, sig)

    def _end_on_signal(self, sig: int) -> None:
        self.exit(128 + sig)
        # a worker stuck in a call must not keep the process alive: it goes after a grace period
        timer = threading.Timer(SIGNAL_GRACE_S, os._exit, (128 + sig,))
        timer.daemon = True
        timer.start()

    def _set_banner(self, text: str | None) -> None:
        banner = self._main.query_one("#banner", Static)
        banner.update(text or "")
        banner.set_class(bool(text), "shown")

    # ---- loading from the store (thread workers -> messages)

    @work(thread=True, exclusive=True, group="initial", exit_on_error=False)
    def _initial_load(self) -> None:
        # `since` first: the window, counts and islands read afterwards (in parallel, each on its own
        # connection) see at least everything up to it, and the link replays what comes after.
        since = self._since if self._since is not None else self.view.last_seq(self.run_id)
        self.call_from_thread(self._start_loads)
        recent = decoded(self.view.events_since(max(0, since - 200), self.run_id, limit=200)) if since else []
        lines = [line for line in map(event_line, recent) if line]
        advice = self.view.recommendations(self.run_id)
        if advice and not any(isinstance(e.event, Recommendations) for e in recent):
            lines.insert(0, "advice: " + " | ".join(advice))  # the meta-summarizer's current set
        if lines:
            self.call_from_thread(self._main.query_one("#engine-log", Log).write_lines, lines)
        if self.socket_path:
            self.call_from_thread(self._link, since)

    def _start_loads(self) -> None:
        self._candidates_busy = self._summary_busy = True
        self._load_candidates(self.filter_text, self.sort)
        self._load_summary()

    @work(thread=True, exclusive=True, group="summary", exit_on_error=False)
    def _load_summary(self) -> None:
        t0 = time.perf_counter()
        try:
            summary, islands = self.view.summary(self.run_id), self.view.islands(self.run_id)
        except BaseException:
            self._summary_busy = False
            raise
        self.post_message(SummaryLoaded(summary, islands, time.perf_counter() - t0))

    @work(thread=True, exclusive=True, group="candidates", exit_on_error=False)
    def _load_candidates(self, filter_text: str, sort: tuple[str, bool] | None = None) -> None:
        t0 = time.perf_counter()
        try:
            rows = self.view.candidates(self.run_id, filter_text, sort=sort)
        except BaseException:
            self._candidates_busy = False
            raise
        self.post_message(CandidatesLoaded(rows, filter_text, time.perf_counter() - t0, sort))

    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def _load_detail(self, candidate_id: int) -> None:
        self.post_message(DetailLoaded(self.view.detail(candidate_id, dark=self.current_theme.dark)))

    @work(thread=True, exclusive=True, group="scores", exit_on_error=False)
    def _load_scores(self) -> None:
        self.post_message(ScoresLoaded(self.view.scores(self.run_id)))

    def _tick(self) -> None:
        """Re-query what events made stale, never more often than the last query's cost allows."""
        self._refresh_keys()
        now = time.monotonic()
        if self._dirty and not self._summary_busy and now >= self._summary_next:
            self._dirty = False
            self._summary_busy = True
            self._load_summary()
            if self._plot_visible():
                self._load_scores()
        if self._filter_dirty and not self._candidates_busy and now >= self._candidates_next:
            self._filter_dirty = False
            self._candidates_busy = True
            self._load_candidates(self.filter_text, self.sort)
        if self.live and self.client is not None and now >= self._status_next:
            self._status_next = now + NODES_POLL_S
            self.send_command("status")

    @staticmethod
    def _next_refresh(elapsed_s: float) -> float:
        return time.monotonic() + max(REFRESH_S, REFRESH_COST_FACTOR * elapsed_s)

    def _plot_visible(self) -> bool:
        return self._main.query_one(DetailTabs).active == "tab-plot"

    @_ui_guard
    @on(SummaryLoaded)
    def _summary_loaded(self, message: SummaryLoaded) -> None:
        self._summary_busy = False
        self._summary_next = self._next_refresh(message.elapsed_s)
        summary = message.summary
        if self.live and self.summary.state:
            summary = replace(summary, state=self.summary.state)  # the engine's word is newer than the row
        if self.ended is not None:
            summary = replace(summary, state=self.ended[0])  # its last word, whatever a slow read saw
        if self.live and not summary.nodes:
            summary = replace(summary, nodes=self.summary.nodes)  # the engine's (status), not the table's
        if self.socket_path is None and self.summary.state != summary.state:  # opened read-only: now its state is known
            self._set_banner(advice.read_only_banner(self.run_id, summary.state))
        self.summary = summary
        header = self._main.query_one(RunHeader)
        header.live = self.live
        header.summary = self.summary
        self._main.query_one(IslandsTable).show(message.islands)
        self.toasts.know_best(self.summary.best.candidate if self.summary.best else None)
        self._toast(self.toasts.nodes(self.summary.nodes))
        self._toast(self.toasts.reviews(self.summary.needs_review))

    def _nodes_changed(self, nodes: list[dict[str, Any]]) -> list[Toast]:
        """The engine's node states (a status reply): the nodes screen, and what to toast."""
        self.summary = replace(self.summary, nodes=tuple(nodes))
        for screen in self.screen_stack:
            if isinstance(screen, NodesScreen):
                screen.update_nodes(nodes)
        return self.toasts.nodes(nodes)

    def _toast(self, toasts: list[Toast]) -> None:
        for text, severity in toasts:
            self.notify(text, severity=severity, timeout=8)  # type: ignore[arg-type]

    @_ui_guard
    @on(CandidatesLoaded)
    def _candidates_loaded(self, message: CandidatesLoaded) -> None:
        self._candidates_busy = False
        self._candidates_next = self._next_refresh(message.elapsed_s)
        if message.filter_text != self.filter_text or message.sort != self.sort:
            return  # a newer filter or order is on its way
        self._main.query_one(CandidatesTable).load(message.rows, message.filter_text, message.sort)
        if self._best_wanted is not None:
            self._select_best(self._best_wanted)

    @on(CandidatesTable.SortRequested)
    def _sort_requested(self, message: CandidatesTable.SortRequested) -> None:
        self.sort = message.sort
        self._candidates_busy = True
        self._load_candidates(self.filter_text, self.sort)

    @on(CandidateSelected)
    def _candidate_selected(self, message: CandidateSelected) -> None:
        self.selected_id = message.candidate_id
        self._schedule_detail(message.candidate_id, throttle=message.follow)

    def _schedule_detail(self, candidate_id: int, throttle: bool = False) -> None:
        """Load the detail of `candidate_id` soon. A user's move debounces (restarts a short timer); a
        change made by the stream throttles (joins the pending load), so a tail under 100 events/s reloads
        and re-renders the detail once a second instead of on every batch."""
        self._pending_detail = candidate_id
        if self._detail_timer is not None:
            if throttle:
                return
            self._detail_timer.stop()
        self._detail_timer = self.set_timer(DETAIL_FOLLOW_S if throttle else DETAIL_DEBOUNCE_S, self._fire_detail)

    def _fire_detail(self) -> None:
        self._detail_timer = None
        if self._pending_detail is not None:
            self._load_detail(self._pending_detail)

    @_ui_guard
    @on(DetailLoaded)
    def _detail_loaded(self, message: DetailLoaded) -> None:
        # A thread worker's result arrives even when a newer load replaced it (exclusive workers cannot stop
        # a thread), and possibly after the newer one: a detail that is not the selected one's is stale.
        if message.detail is not None and self.selected_id is not None and message.detail.id != self.selected_id:
            if self._detail_timer is None and (self.detail is None or self.detail.id != self.selected_id):
                self._schedule_detail(self.selected_id)
            return
        self.detail = message.detail
        for tabs in self._main.query(DetailTabs):  # absent while the app shuts down
            tabs.show(message.detail)

    @_ui_guard
    @on(ScoresLoaded)
    def _scores_loaded(self, message: ScoresLoaded) -> None:
        for plot in self._main.query(ScorePlot):
            plot.show(message.points)

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "tab-plot":
            self._load_scores()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.notify(f"{event.worker.name}: {event.worker.error}", severity="error", timeout=8)

    # ---- the engine link

    @work(exclusive=True, group="link", exit_on_error=False)
    async def _link(self, since: int) -> None:
        assert self.socket_path is not None
        client = EngineClient(self.socket_path)
        try:
            hello = await client.connect(since=since)
        except (OSError, EngineError, EngineGone, TimeoutError) as exc:
            await client.close()
            self.post_message(EngineLost(f"cannot reach the engine: {exc}"))
            return
        self.client = client
        self.post_message(EngineConnected(hello))
        try:
            async for batch in client.batches(interval=EVENT_BATCH_S):
                self.post_message(EngineEvents(batch))
        except EngineEnded as end:
            self.post_message(EngineEndedRun(end.state, end.reason))
        except (EngineGone, EngineError) as exc:
            self.post_message(EngineLost(str(exc)))
        finally:
            self.client = None
            await client.close()

    @_ui_guard
    @on(EngineConnected)
    def _connected(self, message: EngineConnected) -> None:
        self.live = True
        status = message.hello.get("status") or {}
        self.summary = replace(
            self.summary,
            state=status.get("state") or self.summary.state,
            nodes=tuple(status.get("nodes") or self.summary.nodes),
        )
        self._toast(self.toasts.nodes(self.summary.nodes))
        header = self._main.query_one(RunHeader)
        header.live = True
        header.summary = self.summary
        self._set_banner(None)
        self._dirty = True

    @_ui_guard
    @on(EngineEndedRun)
    def _ended(self, message: EngineEndedRun) -> None:
        """The engine's last word: the run's final state at once, and no reconnecting."""
        self.live = False
        self.ended = (message.state, message.reason)
        self.summary = replace(self.summary, state=message.state)
        header = self._main.query_one(RunHeader)
        header.live = False
        header.summary = self.summary
        self._set_banner(advice.ended_banner(self.run_id, message.state, message.reason))
        self._dirty = True

    @_ui_guard
    @on(EngineLost)
    def _lost(self, message: EngineLost) -> None:
        self.live = False
        self._main.query_one(RunHeader).live = False
        state = self.summary.state
        next_step = advice.resume_or_fork(self.run_id, state)
        if state in TERMINAL_STATES:
            self._set_banner(f"the run is {state}; the store is open read-only; {next_step}")
        else:
            self._set_banner(f"read-only: the engine went away ({message.reason}); {next_step}")
        self._dirty = True

    @_ui_guard
    @on(EngineEvents)
    def _events(self, message: EngineEvents) -> None:
        table = self._main.query_one(CandidatesTable)
        lines: list[str] = []
        toasts: list[Toast] = []
        selected_touched = False
        with self.batch_update():
            table.begin_batch()
            for envelope in decoded(message.events):
                e = envelope.event
                if isinstance(e, CandidateAdded):
                    if e.parent is not None and e.id is not None:
                        self._parents[int(e.id)] = int(e.parent)
                    # a new child of the selected one: its Lineage tab lists it
                    selected_touched |= e.parent is not None and e.parent == self.selected_id
                    if self.filter_text or self.sort:  # where a new row goes is the query's to say
                        self._filter_dirty = True
                        table.upsert(e.data(), add=False)
                    else:
                        table.upsert(e.data(), add=True)
                    self._dirty = True
                elif isinstance(e, (CandidateStatus, Result)):
                    table.upsert(e.data(), add=False)
                    self._dirty = True
                    # the selected one, or a child of it (its Lineage tab shows the child's speedup)
                    selected_touched |= self.selected_id is not None and (
                        e.id == self.selected_id or self._parents.get(e.id) == self.selected_id
                    )
                elif isinstance(e, Mark):
                    table.upsert({"id": e.id, "mark": e.verdict, "mark_text": e.text}, add=False)
                    if e.id is not None and table.cell_text(e.id, "verdict") == "review":
                        # a person decided: the review is closed (engine/run/control.py), the verdict says so
                        table.upsert({"id": e.id, "status": "done", "review": f"{e.verdict}ed"}, add=False)
                    selected_touched |= e.id == self.selected_id
                    self._dirty = True  # a rejected best is the best no more: the header reads it again
                elif isinstance(e, RunState):
                    self.summary = replace(self.summary, state=e.state or self.summary.state)
                    self._dirty = True
                elif isinstance(e, (Best, LlmCall, Migration, ArchiveCell)):
                    if isinstance(e, Best) and e.id is not None:  # `b` goes to it before the next reload
                        self.summary = replace(self.summary, best=e.ref)
                    self._dirty = True
                elif isinstance(e, Fork) and not self._forking and e.new_run not in self._own_forks:
                    # another client's fork (ours gets one toast when it is done, below)
                    self.notify(f"fork {e.new_run} created (start it: cuco resume {e.new_run})")
                toasts += self.toasts.event(e)
                line = event_line(envelope)
                if line:
                    lines.append(line)
            table.end_batch()
            if lines:
                self._main.query_one("#engine-log", Log).write_lines(lines)
            header = self._main.query_one(RunHeader)
            header.summary = self.summary
        self.events_applied += len(message.events)
        self._toast(toasts)
        if selected_touched and self.selected_id is not None:
            self._schedule_detail(self.selected_id, throttle=True)

    # ---- commands

    def need_live(self, what: str, shell: str | None = None) -> bool:
        """Whether the engine is there to do `what`; if not, say what works instead (`shell`: the command
        that does it from a shell, where one does it without an engine)."""
        if self.live and self.client is not None:
            return True
        state = self.ended[0] if self.ended is not None else self.summary.state
        self.notify(
            advice.without_engine(what, self.run_id, state, ended=self.ended is not None, shell=shell),
            severity="warning",
        )
        return False

    @work(group="command", exit_on_error=False)
    async def send_command(self, op: str, **args: Any) -> None:
        client = self.client
        if client is None:
            self.post_message(CommandDone(op, False, "no live engine"))
            return
        try:
            reply = await client.request(op, **args)
        except (EngineError, EngineGone) as exc:
            self.post_message(CommandDone(op, False, str(exc)))
            return
        self.post_message(CommandDone(op, True, "", reply))

    @_ui_guard
    @on(CommandDone)
    def _command_done(self, message: CommandDone) -> None:
        if not message.ok:
            if message.op != "status":  # a poll: a lost engine is told by the link (EngineLost)
                self.notify(f"{message.op} failed: {message.text}", severity="error", timeout=8)
            return
        status = message.reply.get("status") or {}
        if "nodes" in status:
            self._toast(self._nodes_changed(status.get("nodes") or []))
        if status.get("state"):
            self.summary = replace(self.summary, state=status["state"])
            self._main.query_one(RunHeader).summary = self.summary
        if message.op == "fork":
            new_run: str = message.reply["new_run"]
            self._forking = max(0, self._forking - 1)
            self._own_forks.add(new_run)
            if message.reply.get("_start"):
                self._start_fork(new_run)  # one toast, once it runs (or why it did not start)
            else:
                self.notify(f"forked {new_run}, paused (start it: cuco resume {new_run})")
        elif message.op != "status":
            self.notify(f"{message.op}: done", timeout=3)
        self._dirty = True

    def action_toggle_pause(self) -> None:
        if not self.need_live("pause"):
            return
        if self.summary.state == "paused":
            self.send_command("resume")
        else:
            self.send_command("pause", hard=False)

    def action_hard_pause(self) -> None:
        if self.need_live("hard pause"):
            self.send_command("pause", hard=True)

    def _selected(self, what: str) -> int | None:
        cid = self._main.query_one(CandidatesTable).selected_id()
        if cid is None:
            self.notify(f"{what}: select a candidate first", severity="warning")
        return cid

    def action_accept(self) -> None:
        cid = self._selected("accept")
        if cid is None or not self.need_live("accept", advice.accept_command(self.run_id, cid)):
            return

        def done(note: str | None) -> None:
            if note is not None:
                self.send_command("accept", candidate=cid, note=note)

        self.push_screen(NoteModal(cid), done)

    def action_reject(self) -> None:
        cid = self._selected("reject")
        if cid is None or not self.need_live("reject", advice.reject_command(self.run_id, cid)):
            return

        def done(reason: str | None) -> None:
            if reason:
                self.send_command("reject", candidate=cid, reason=reason)

        self.push_screen(ReasonModal(cid), done)

    def action_fork(self) -> None:
        cid = self._main.query_one(CandidatesTable).selected_id()
        if not self.need_live("fork", advice.fork_command(self.run_id, cid)):
            return

        def done(request: ForkRequest | None) -> None:
            if request is not None:
                self._fork(request)

        self.push_screen(ForkModal(cid, self.live), done)

    @work(group="command", exit_on_error=False)
    async def _fork(self, request: ForkRequest) -> None:
        client = self.client
        if client is None:
            self.post_message(CommandDone("fork", False, "no live engine"))
            return
        self._forking += 1
        try:
            reply = await client.request(
                "fork", from_candidate=request.from_candidate, name=request.name, overrides=request.overrides
            )
        except (EngineError, EngineGone) as exc:
            self._forking = max(0, self._forking - 1)
            self.post_message(CommandDone("fork", False, str(exc)))
            return
        reply["_start"] = request.start
        self.post_message(CommandDone("fork", True, "", reply))

    @work(thread=True, group="spawn", exit_on_error=False)
    def _start_fork(self, new_run: str) -> None:
        proc = spawn_daemon(self.home, new_run)
        info = wait_for_daemon(self.home, new_run, proc)
        asyncio.run(one_request(info.socket, "resume"))
        self.call_from_thread(self.notify, f"forked {new_run} and started it (watch it: cuco attach {new_run})")

    def action_edit(self) -> None:
        detail = self.detail
        if detail is None or not detail.source_text:
            self.notify("edit: select a candidate with a source first", severity="warning")
            return
        path = Path(tempfile.gettempdir()) / f"cuco-{self.run_id}-{detail.id}.cu"
        path.write_text(detail.source_text)
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        try:
            with self.suspend():
                subprocess.run([*shlex.split(editor), str(path)], check=False)
        except SuspendNotSupported:
            self.notify(f"cannot open an editor here; the source is in {path}", severity="warning")
        except OSError as exc:
            self.notify(f"{editor}: {exc}", severity="error")

    def action_filter(self) -> None:
        box = self._main.query_one("#filter", Input)
        box.add_class("shown")
        box.value = self.filter_text
        box.focus()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        try:
            parse_filter(text)
        except FilterError as exc:
            self.notify(str(exc), severity="error")
            return
        self.filter_text = text
        event.input.remove_class("shown")
        self._main.query_one(CandidatesTable).focus()
        self._candidates_busy = True
        self._load_candidates(text, self.sort)

    def on_key(self, event: Any) -> None:
        if event.key == "escape":
            box = self._main.query_one("#filter", Input)
            if box.has_class("shown") and self.screen is self.screen_stack[0]:
                box.remove_class("shown")
                self._main.query_one(CandidatesTable).focus()
                event.stop()

    def action_jump_to_best(self) -> None:
        best = self.summary.best
        if best is None:
            self.notify("best: no correct candidate yet", severity="warning")
            return
        self._select_best(best.candidate)

    def _select_best(self, cid: int) -> None:
        """Select the best; if it is not among the rows shown, show the run sorted by speedup (once)."""
        table = self._main.query_one(CandidatesTable)
        if table.select(cid):
            self._best_wanted = None
            table.focus()
            return
        if self._best_wanted == cid:
            self._best_wanted = None
            self.notify(f"best #{cid} is hidden by the filter /{self.filter_text}", severity="warning")
            return
        self._best_wanted = cid
        self.sort = ("speedup", True)
        self._candidates_busy = True
        self._load_candidates(self.filter_text, self.sort)

    def action_show_lineage(self) -> None:
        """The selected candidate's lineage (none selected: the best's)."""
        self.push_screen(LineageScreen(self.view, self.run_id, self._main.query_one(CandidatesTable).selected_id()))

    def action_show_configs(self) -> None:
        self.push_screen(ConfigsScreen(self.view, self.run_id))

    def action_show_llm(self) -> None:
        self.push_screen(LlmScreen(self.view, self.run_id))

    def action_show_nodes(self) -> None:
        self.push_screen(NodesScreen(self.view, self.run_id))

    def action_show_runs(self) -> None:
        self.push_screen(RunsScreen(self.view, self.run_id))

    def action_show_review(self) -> None:
        self.push_screen(ReviewScreen(self.view, self.run_id))

    def action_toggle_theme(self) -> None:
        self.theme = DEFAULT_LIGHT if self.current_theme.dark else DEFAULT_DARK
        if self.selected_id is not None:
            self._schedule_detail(self.selected_id)  # re-highlight for the new background

    def action_focus_pane(self, pane: str) -> None:
        if pane == "detail":  # its tab bar: left/right switch tabs, tab goes into the tab
            self._main.query_one(DetailTabs).focus_tabs()
            return
        target = {"islands": "#islands", "candidates": "#candidates", "detail": "#detail", "log": "#engine-log"}[pane]
        self._main.query_one(target).focus()

    def action_detail_tab(self, step: int) -> None:
        self._main.query_one(DetailTabs).next_tab(step)

    def action_show_plot(self) -> None:
        self._main.query_one(DetailTabs).active = "tab-plot"

    def action_help(self) -> None:
        self.push_screen(HelpScreen(describe_bindings(self, self.settings.keymap), self.settings.source))

    def action_detach(self) -> None:
        self.detached = True
        self.exit(0)

    def action_stop_run(self) -> None:
        if not self.live:
            self.exit(0)
            return

        def done(yes: bool | None) -> None:
            if yes:
                self._stop_and_exit()

        self.push_screen(ConfirmModal(f"Stop run {self.run_id}? Jobs in flight are cancelled.", yes="Stop run"), done)

    @work(group="command", exit_on_error=False)
    async def _stop_and_exit(self) -> None:
        client = self.client
        try:
            if client is not None:
                await client.request("stop", timeout=30)
        except (EngineError, EngineGone) as exc:
            self.notify(f"stop failed: {exc}", severity="error")
            return
        self.exit(0)

    # ---- which keys work now (the footer shows only those, with the word for the state)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Pause, stop, accept, reject and fork need a live engine that can still take them: on a read-only
        or finished run they are neither shown nor run."""
        if action in ENGINE_ACTIONS:
            return self.live and self.summary.state not in TERMINAL_STATES
        if action in MAIN_SCREEN_ACTIONS and self.screen_stack and self.screen is not self.screen_stack[0]:
            return False  # they act on the main screen's table or detail, hidden under this one
        return True

    def binding_label(self, binding: Binding) -> str:
        """The footer's word for a key in the current state (space resumes a paused run)."""
        if binding.action == "toggle_pause" and self.summary.state == "paused":
            return "Resume"
        return binding.description

    def _refresh_keys(self) -> None:
        """The footer follows the link and the run's state (cheap: compared 4 times a second)."""
        key = (self.live, self.summary.state)
        if key != self._keys_state:
            self._keys_state = key
            self.refresh_bindings()

    # ---- for the command palette

    def palette_candidates(self) -> list[tuple[int, str]]:
        table = self._main.query_one(CandidatesTable)
        out = []
        for cid in table.row_ids()[-2000:]:
            row = table.row_text(cid)
            out.append((cid, f"#{row[0]} isl {row[1]} {row[3]} {row[4]} {row[5]}"))
        return out

    def palette_runs(self) -> list[str]:
        return self.view.run_ids()

    def palette_nodes(self) -> list[str]:
        return [n.get("name", "?") for n in self.summary.nodes]

    def select_candidate(self, candidate_id: int) -> None:
        if not self._main.query_one(CandidatesTable).select(candidate_id):
            self.notify(f"#{candidate_id} is not in the visible window; filter with id={candidate_id}")

    async def on_unmount(self) -> None:
        if self.client is not None:
            await self.client.close()
        self.view.close()
