"""What a mutator gets and gives back.

The engine picks the island, the parent and the inspirations; a mutator only proposes a child source.
The engine then validates it (edits only inside EVOLVE-BLOCKs), deduplicates it and evaluates it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ...candidate_view import CandidateView

if TYPE_CHECKING:
    from ...store.store import Store
    from ...workload import Workload


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


class Mutator(Protocol):
    name: str

    async def propose(self, ctx: ProposalContext) -> Proposal | None:
        """A child, or None when this mutator has nothing to offer now (budget spent, no move left)."""
        ...
