"""The run's candidates as the loop keeps them: born (registered in memory, its row queued with the ledger and
awaited before its first job), waiting (pending and not in flight), given a result (updated, admitted to the
population if it counts, its rows written behind the loop), and the counters that follow them: evaluations,
candidate numbers, evaluations since the best, the seed's baseline."""

from __future__ import annotations

import asyncio

from ..evaluation.evaluation import EvalOutcome, trim
from ..search import ranking
from ..search.islands import IslandModel
from ..search.mutators.base import Proposal
from ..search.population import Cand, Population
from ..store import counting
from ..store.schema import DONE, FINAL_STATUSES, PENDING, RUNNING
from ..store.store import Store
from ..workload import Workload
from .ledger import Ledger


class Roster:
    def __init__(self, store: Store, workload: Workload, ledger: Ledger, population: Population, islands: IslandModel):
        self.store, self.workload, self.ledger = store, workload, ledger
        self.population, self.islands = population, islands
        self.sources: dict[str, str] = {}  # content hash -> source (immutable, so never stale)
        self.waiting: set[int] = set()  # pending and not in flight
        self.persisting: dict[int, asyncio.Future] = {}  # candidate id -> its row's write
        self.next_number = 0
        self.evaluated = 0  # evaluated in this run (not fork copies)
        self.since_best = 0
        self.baseline_ms: float | None = None

    def source(self, digest: str) -> str:
        text = self.sources.get(digest)
        if text is None:
            text = self.sources[digest] = self.store.blobs.get_text(digest)
        return text

    def account(self, c: Cand) -> None:
        """Fold a candidate loaded from the store into the counters."""
        self.next_number = max(self.next_number, c.number + 1)
        if c.status in FINAL_STATUSES and not c.forked:
            self.evaluated += 1
        if c.status in (PENDING, RUNNING):
            self.waiting.add(c.id)

    def pending_idle(self) -> list[Cand]:
        return [self.population.cands[i] for i in sorted(self.waiting)]

    def born(self, proposal: Proposal, parent: Cand | None, island: int, number: int = 0) -> Cand:
        """Where a candidate is born: registered in memory, its row queued (the ledger's; the candidate's
        evaluation awaits it first)."""
        space = self.workload.design_space
        descriptor = space.descriptor(proposal.source)
        digest = self.store.blobs.put_text(proposal.source)
        self.sources[digest] = proposal.source
        cell = space.cell(descriptor)
        cid = self.store.next_candidate_id()
        generation = (parent.generation + 1) if parent else 0
        c = Cand(cid, number, island, generation, PENDING, digest, descriptor, cell, proposal.operator)
        c.parent_id = parent.id if parent else None
        self.persisting[cid] = self.ledger.proposed(c, proposal, parent)
        self.population.add(c)
        self.waiting.add(cid)
        self.next_number = max(self.next_number, number + 1)
        if parent is None:  # the seed starts every island
            for i in range(len(self.islands)):
                self.islands.add(i, cid)
        else:
            self.islands.add(island, cid)
        return c

    async def persisted(self, c: Cand) -> None:
        pending = self.persisting.pop(c.id, None)
        if pending is not None:
            await asyncio.shield(pending)

    def waits(self, c: Cand) -> None:
        """Pending again (a pause on the environment, a cancelled evaluation): evaluated when the run goes on."""
        c.status = PENDING
        self.waiting.add(c.id)

    async def back_to_pending(self, c: Cand) -> None:
        """A cancelled evaluation (pause --hard, stop): the candidate is evaluated again on resume."""
        self.waits(c)
        await self.ledger.back_to_pending(c)

    def record(self, c: Cand, outcome: EvalOutcome, elapsed_s: float) -> None:
        """The result: the candidate updated, admitted to the population if it counts, and the ledger's
        rows for it all (written behind: the slot is free for the next candidate at once)."""
        if c.status not in FINAL_STATUSES:
            self.evaluated += 1
        c.review = counting.review_state(outcome.status, outcome.metrics)
        c.status, c.fitness, c.speedup, c.time_ms, c.reason = (
            outcome.status,
            ranking.fitness(outcome.speedup, (outcome.metrics or {}).get("speedup_interval"))
            if outcome.status == DONE
            else None,
            outcome.speedup,
            outcome.time_ms,
            outcome.reason or "",
        )
        c.metrics = {**(outcome.metrics or {}), "feedback": trim(outcome.feedback)}  # as the ledger stores it
        admission = self.population.admit(c)
        self.since_best = 0 if admission.best else self.since_best + 1
        baseline = outcome.baseline_ms if c.number == 0 and c.operator == "seed" else None
        if baseline is not None:
            self.baseline_ms = baseline
        self.ledger.result(c, outcome, admission, baseline, elapsed_s)
