"""Typed messages between the TUI's workers, widgets and the app (widgets never call each other)."""

from __future__ import annotations

from typing import Any

from textual.message import Message

from engine.contract import RunSummary


class EngineConnected(Message):
    def __init__(self, hello: dict[str, Any]) -> None:
        super().__init__()
        self.hello = hello


class EngineEvents(Message):
    """A batch of engine events (every ~50 ms, or on a lull)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__()
        self.events = events


class EngineLost(Message):
    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class EngineEndedRun(Message):
    """The engine said the run ended (final state, reason) and closed its socket."""

    def __init__(self, state: str, reason: str) -> None:
        super().__init__()
        self.state = state
        self.reason = reason


class SummaryLoaded(Message):
    def __init__(self, summary: RunSummary, islands: list[dict[str, Any]], elapsed_s: float = 0.0) -> None:
        super().__init__()
        self.summary = summary
        self.islands = islands
        self.elapsed_s = elapsed_s


class CandidatesLoaded(Message):
    def __init__(
        self, rows: list[dict[str, Any]], filter_text: str, elapsed_s: float, sort: tuple[str, bool] | None = None
    ) -> None:
        super().__init__()
        self.rows = rows
        self.filter_text = filter_text
        self.elapsed_s = elapsed_s
        self.sort = sort  # (column, descending) the rows are in; None: proposal order


class CandidateSelected(Message):
    """The cursor rests on a candidate (posted by the candidates table); `follow`: the stream moved it."""

    def __init__(self, candidate_id: int, follow: bool = False) -> None:
        super().__init__()
        self.candidate_id = candidate_id
        self.follow = follow


class DetailLoaded(Message):
    def __init__(self, detail: Any) -> None:
        super().__init__()
        self.detail = detail


class ScoresLoaded(Message):
    def __init__(self, points: list[tuple[int, float]]) -> None:
        super().__init__()
        self.points = points


class CommandDone(Message):
    def __init__(self, op: str, ok: bool, text: str, reply: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.op = op
        self.ok = ok
        self.text = text
        self.reply = reply or {}
