"""The contract between the engine and everything that shows it (the TUI, headless mode, `cuco serve`,
`cuco report`, the daemon's clients): every event kind with its fields, a run's summary, a reference to
the best candidate and a candidate's per-config results. Declared once, here; docs/contract.md describes it.

The store writes an event as its `kind` and its fields (`Store.event(run_id, record)`); a viewer reads the
stored or streamed dict back with `decode`. Only the records declared in `EVENTS` can be written: a record
of another type is refused (`UndeclaredEvent`). Standard library only, so every floor can import it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar


class UndeclaredEvent(TypeError):
    """An event the contract does not declare was about to be written."""


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run; `kind` names it on the wire and in the events table."""

    kind: ClassVar[str] = ""

    def data(self) -> dict[str, Any]:
        """The fields as the store writes them (`data_json`) and the daemon sends them (`data`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class RunState(Event):
    """The run's state changed (created, paused, resumed, stopped, finished, failed)."""

    kind: ClassVar[str] = "run"
    state: str
    reason: str = ""


@dataclass(frozen=True)
class Log(Event):
    kind: ClassVar[str] = "log"
    level: str  # info | warning | error
    message: str


@dataclass(frozen=True)
class CandidateAdded(Event):
    """A proposal was written (pending) before anything of it runs."""

    kind: ClassVar[str] = "candidate"
    id: int
    number: int
    island: int
    generation: int
    parent: int | None
    operator: str
    mutator: str
    status: str
    cell: str


@dataclass(frozen=True)
class CandidateStatus(Event):
    """A candidate entered a stage (running), or went back to pending (paused, cancelled)."""

    kind: ClassVar[str] = "candidate_status"
    id: int
    status: str
    stage: str


@dataclass(frozen=True)
class Result(Event):
    """A candidate's verdict: its final status and numbers (`review`: needs_review when held for a person)."""

    kind: ClassVar[str] = "result"
    id: int
    status: str
    correct: bool | None
    speedup: float | None
    time_ms: float | None
    reason: str | None
    fitness: float | None
    review: str | None = None
    speedup_interval: list[float] | None = None  # [low, high], 95 %; None on results from before intervals


@dataclass(frozen=True)
class ArchiveCell(Event):
    """A cell of the archive has a new elite (`id` None: the cell was emptied)."""

    kind: ClassVar[str] = "archive"
    cell: str
    id: int | None
    fitness: float | None


@dataclass(frozen=True)
class Best(Event):
    """A new best candidate of the run."""

    kind: ClassVar[str] = "best"
    id: int
    speedup: float | None
    time_ms: float | None
    speedup_interval: list[float] | None = None
    remeasured: bool = False  # the numbers come from a side-by-side re-measurement of the finalists

    @property
    def ref(self) -> BestRef:
        return BestRef(self.id, self.speedup, self.time_ms, interval_of(self.speedup_interval), self.remeasured)


@dataclass(frozen=True)
class Migration(Event):
    kind: ClassVar[str] = "migration"
    src: int
    dst: int
    id: int


@dataclass(frozen=True)
class Mark(Event):
    """A person accepted or rejected a candidate (`verdict`: accept | reject | clear)."""

    kind: ClassVar[str] = "mark"
    id: int
    verdict: str
    text: str = ""


@dataclass(frozen=True)
class Fork(Event):
    kind: ClassVar[str] = "fork"
    new_run: str
    from_candidate: int | None


@dataclass(frozen=True)
class StrategyMark(Event):
    """A person pinned, retired or edited an LLM mutation strategy."""

    kind: ClassVar[str] = "strategy_mark"
    strategy: str | None  # None for "add": the new strategy gets its id when the mutator folds the mark in
    verdict: str
    text: str
    mark: int


@dataclass(frozen=True)
class Strategies(Event):
    """The meta step retired, rewrote or added mutation strategies."""

    kind: ClassVar[str] = "strategies"
    at: int
    retired: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    llm_call: int | None = None


@dataclass(frozen=True)
class Recommendations(Event):
    """The meta-summarizer's new advice for the run."""

    kind: ClassVar[str] = "recommendations"
    items: list[str]
    at: int
    llm_call: int | None = None


@dataclass(frozen=True)
class LlmCall(Event):
    kind: ClassVar[str] = "llm_call"
    id: int
    model: str
    purpose: str
    status: str
    cost_usd: float
    tokens: int


EVENTS: tuple[type[Event], ...] = (
    RunState,
    Log,
    CandidateAdded,
    CandidateStatus,
    Result,
    ArchiveCell,
    Best,
    Migration,
    Mark,
    Fork,
    StrategyMark,
    Strategies,
    Recommendations,
    LlmCall,
)
BY_KIND: dict[str, type[Event]] = {e.kind: e for e in EVENTS}
KINDS: frozenset[str] = frozenset(BY_KIND)


def checked(record: Any) -> Event:
    """`record` if the contract declares its type, else UndeclaredEvent (what the store calls before a write)."""
    if type(record) not in BY_KIND.values():
        raise UndeclaredEvent(
            f"{type(record).__name__} is not an event the contract declares "
            f"(engine/contract.py EVENTS: {', '.join(sorted(KINDS))})"
        )
    return record


@dataclass(frozen=True)
class Envelope:
    """An event as a viewer receives it: where it sits in the events table, and the typed record."""

    seq: int | None
    run: str | None
    ts: float
    event: Event


def decode(message: dict[str, Any]) -> Envelope | None:
    """An event dict (the events table's row, a daemon message, `Store.on_event`'s argument) as a typed
    record. A kind this version does not know (a newer cuco wrote it) is None; a field it does not know is
    dropped and a field it lacks is None, so a store written by another version still reads."""
    cls = BY_KIND.get(str(message.get("kind")))
    if cls is None:
        return None
    data = message.get("data") or {}
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = data[f.name]
        elif f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
        else:
            values[f.name] = None
    return Envelope(message.get("seq"), message.get("run"), float(message.get("ts") or 0.0), cls(**values))


# ----- what viewers read -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BestRef:
    """The run's best candidate, wherever it is shown (header, headless, `b`, status replies, report)."""

    candidate: int
    speedup: float | None
    time_ms: float | None
    speedup_interval: tuple[float, float] | None = None
    remeasured: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "speedup": self.speedup,
            "time_ms": self.time_ms,
            "speedup_interval": list(self.speedup_interval) if self.speedup_interval else None,
            "remeasured": self.remeasured,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BestRef | None:
        """A status reply's `best` (as_dict's shape) read back; None when there is none."""
        if not data or data.get("candidate") is None:
            return None
        return cls(
            int(data["candidate"]),
            data.get("speedup"),
            data.get("time_ms"),
            interval_of(data.get("speedup_interval")),
            bool(data.get("remeasured")),
        )

    @property
    def shown(self) -> str:
        """The speedup with its spread, as every viewer writes it."""
        return format_speedup(self.speedup, self.speedup_interval)


@dataclass(frozen=True)
class RunSummary:
    """A run's counts and best, computed from the store (engine/views: `run_summary`).

    `evaluated` counts the final verdicts (done, incorrect, failed, refused) of the run's own candidates
    (a fork's copies of its parent's are not evaluated again); `failed` is incorrect + failed."""

    run: str
    workload: str
    state: str
    stop_reason: str | None = None
    parent_run: str | None = None
    fork_candidate: int | None = None
    evaluated: int = 0
    correct: int = 0
    incorrect: int = 0
    failed: int = 0
    pending: int = 0  # proposed, not yet final (pending or running)
    refused: int = 0
    best: BestRef | None = None
    baseline_time_ms: float | None = None
    llm_cost_usd: float = 0.0
    elapsed_s: float = 0.0
    needs_review: tuple[int, ...] = ()  # ids held for a person, newest first (at most 50)
    nodes: tuple[dict[str, Any], ...] = ()  # the nodes table's states (a live engine's status is newer)

    @property
    def in_flight(self) -> int:
        return self.pending


CONFIG_NUMBERS = ("baseline_ms", "candidate_ms", "speedup", "comp_ms", "comm_ms", "bound")
CONFIG_INTERVALS = ("speedup_interval", "efficiency_interval")


def interval_of(value: Any) -> tuple[float, float] | None:
    """A stored `[low, high]` interval as a pair; None when absent (results from before intervals) or malformed."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    low, high = _number(value[0]), _number(value[1])
    if low is None or high is None or low > high:
        return None
    return float(low), float(high)


def format_speedup(value: float | None, interval: Any = None) -> str:
    """A speedup as every viewer and prompt shows it: `1.23x`, `12.3x`, and with its 95 % interval when the
    result has one, `1.23x [1.18-1.29]` (`interval`: a `[low, high]` list or pair; absent or malformed on results
    from before intervals, and then left out); '' without a value, so an unmeasured cell stays blank."""
    number = _number(value)
    if number is None:
        return ""
    pair = interval_of(interval)
    text = f"{_three_figures(number)}x"
    return f"{text} [{_three_figures(pair[0])}-{_three_figures(pair[1])}]" if pair else text


def _three_figures(value: float) -> str:
    """`value` to three significant figures and at most two decimals, never in exponent form (1.13, 12.3,
    0.99, 1234): a third decimal below 1 would be finer than any measurement's spread."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.2f}"
    decimals = min(2, max(0, 2 - math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


@dataclass(frozen=True)
class ConfigResult:
    """One benchmark config's numbers for one candidate (the harness's result, engine/evaluation/harness_result.py)."""

    name: str
    baseline_ms: float | None = None
    candidate_ms: float | None = None
    speedup: float | None = None
    comp_ms: float | None = None
    comm_ms: float | None = None
    bound: float | None = None
    speedup_interval: tuple[float, float] | None = None  # 95 % interval of `speedup`; None before intervals
    efficiency_interval: tuple[float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def config_results(metrics: Any) -> list[ConfigResult]:
    """A candidate's per-config results from its metrics: the benchmark stage's configs (the engine's
    shape), or a flat result's own `configs`; the only reader of that nesting."""
    if not isinstance(metrics, dict):
        return []
    stage: dict[str, Any] = metrics["benchmark"] if configs_from_benchmark(metrics) else metrics
    out = []
    for cfg in stage.get("configs") or []:
        if isinstance(cfg, dict) and cfg.get("name") is not None:
            numbers: dict[str, Any] = {k: _number(cfg.get(k)) for k in CONFIG_NUMBERS}
            numbers.update({k: interval_of(cfg.get(k)) for k in CONFIG_INTERVALS})
            out.append(ConfigResult(str(cfg["name"]), **numbers))
    return out


def configs_from_benchmark(metrics: Any) -> bool:
    """Whether the per-config results are the benchmark stage's (the engine's shape), not a flat result's."""
    return isinstance(metrics, dict) and isinstance(metrics.get("benchmark"), dict)


def metrics_besides_configs(metrics: dict[str, Any]) -> dict[str, Any]:
    """The rest of a harness result (what `config_results` and the flags do not cover), for display."""
    rest = {k: v for k, v in metrics.items() if k not in ("configs", "flags")}
    if configs_from_benchmark(metrics):
        rest["benchmark"] = {k: v for k, v in metrics["benchmark"].items() if k != "configs"}
    return rest


def timeline_figures(metrics: Any, config: str) -> dict[str, Any] | None:
    """The timeline figures of one config's profiled call, kept in the candidate's metrics."""
    if not isinstance(metrics, dict) or not isinstance(metrics.get("timeline"), dict):
        return None
    figures = metrics["timeline"].get(config)
    return figures if isinstance(figures, dict) else None
