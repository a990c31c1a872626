"""What a mutator gets and gives back.

The engine picks the island, the parent and the inspirations; a mutator only proposes a child source.
The engine then validates it (edits only inside EVOLVE-BLOCKs), deduplicates it and evaluates it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...store.store import Store
    from ...workload import Workload


@dataclass
class CandidateView:
    """A candidate as a mutator may see it: public numbers only (no hidden configs)."""

    id: int
    source: str
    descriptor: dict[str, str]
    status: str
    island: int
    generation: int
    operator: str
    speedup: float | None = None
    time_ms: float | None = None
    speedup_interval: list[float] | None = None  # the 95 % interval of the speedup, when measured
    public_metrics: dict[str, Any] = field(default_factory=dict)  # per public config
    feedback: str = ""  # trimmed compile error / mismatch summary / timeout reason
    reject_reason: str = ""  # the operator's reason, for rejected candidates
    timeline: dict[str, Any] = field(default_factory=dict)  # per config: engine/timeline/timeline.py's figures
    reason: str = ""  # a failed candidate's one-line reason (its `feedback` then holds the whole log)
    changes: str = ""  # a failed candidate's diff against its parent


@dataclass
class ProposalContext:
    run_id: str
    workload: Workload
    parent: CandidateView
    inspirations: list[CandidateView]
    second_parent: CandidateView | None  # for crossover
    rejected: list[CandidateView]  # "do not repeat" examples
    island_sources: list[str]  # for novelty checks
    phase: str  # explore | exploit
    rng: random.Random
    evaluation_number: int
    store: Store
    recommendations: list[str] = field(default_factory=list)
    feedback_attempts: int = 3  # bounded retries on malformed answers
    known: Callable[[str], bool] = lambda source: False  # True for a source the run already has
    failures: list[CandidateView] = field(default_factory=list)  # recent failed children, newest first
    repairable: list[CandidateView] = field(default_factory=list)  # failures no child was made from yet


@dataclass
class Proposal:
    source: str
    operator: str  # variant | knob | cross | llm-diff | llm-full | llm-cross | llm-repair
    mutator: str  # design-space | llm:<model>
    note: str = ""
    llm_call_ids: list[int] = field(default_factory=list)
    parent_id: int | None = None  # the child's parent when it is not the context's (a repaired failure)


class BudgetExhausted(Exception):
    """Raised by `propose` when the run's LLM budget (spent + in flight) is committed: stop with reason "budget"."""


class Mutator(Protocol):
    name: str

    async def propose(self, ctx: ProposalContext) -> Proposal | None:
        """A child, or None when this mutator has nothing to offer now (budget spent, no move left)."""
        ...
