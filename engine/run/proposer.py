"""What a mutator is given for one proposal: the island, the parent and the second parent drawn from the island's
eligible members, the inspirations, the rejected examples, the meta-summarizer's advice and, for a model, the
recent failures; each candidate as a `CandidateView` (public numbers only). The draws are seeded by the run's
seed, its id, the candidate number and the attempt, so a run replays them alike."""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import blocks
from ..candidate_view import CandidateView
from ..config import RunConfig
from ..contract import Log, config_results, configs_from_benchmark
from ..llm import failure_memory, spread
from ..search.islands import IslandModel
from ..search.mutators.base import Proposal, ProposalContext
from ..search.population import Cand, Population, fitness, recent_failures
from ..search.selection import power_law_rank, weighted
from ..store.schema import DONE
from ..store.store import Store
from ..workload import Workload

REJECTED_IN_PROMPT = 5
ISLAND_SOURCES = 20  # the island's newest members a novelty check compares against
RECOMMENDATIONS_EVERY_S = 5.0  # the meta-summarizer's advice changes every N evaluations, not every proposal


class NotReady(Exception):
    """No parent can be chosen yet (the seed, or a fork's generation 0, is still being evaluated)."""


@dataclass
class Draw:
    """One proposal's context, and the parent and island it was drawn for."""

    context: ProposalContext
    parent: Cand
    island: int


class Proposer:
    def __init__(
        self,
        run_id: str,
        workload: Workload,
        config: RunConfig,
        store: Store,
        population: Population,
        islands: IslandModel,
        source_of: Callable[[str], str],
    ):
        self.run_id, self.workload, self.config, self.store = run_id, workload, config, store
        self.population, self.islands, self.source_of = population, islands, source_of
        self.attempt = 0
        self.recommendations: tuple[float, list[str]] = (0.0, [])  # (read at, items)

    def view(self, c: Cand) -> CandidateView:
        public = {cfg.name for cfg in self.workload.public_configs}
        bench = config_results(c.metrics) if configs_from_benchmark(c.metrics) else []
        return CandidateView(
            id=c.id,
            source=self.source_of(c.source_hash),
            descriptor=c.descriptor,
            status=c.status,
            island=c.island,
            generation=c.generation,
            operator=c.operator,
            speedup=c.speedup,
            time_ms=c.time_ms,
            speedup_interval=spread.speedup_interval(c.metrics),
            public_metrics={
                x.name: {
                    "baseline_ms": x.baseline_ms,
                    "candidate_ms": x.candidate_ms,
                    "speedup": x.speedup,
                    "speedup_interval": spread.speedup_interval(c.metrics, x.name),
                }
                for x in bench
                if x.name in public
            },
            feedback=c.reason if c.status != DONE else "",
            timeline=c.metrics.get("timeline") or {},
        )

    def failure_view(self, c: Cand) -> CandidateView:
        """A failed child as failure memory shows it: the whole feedback (the log), and its diff."""
        view = self.view(c)
        view.feedback, view.reason = str(c.metrics.get("feedback") or c.reason), c.reason
        cands = self.population.cands
        parent = cands.get(c.parent_id) if c.parent_id is not None else None
        parent_source = self.source_of(parent.source_hash) if parent is not None else None
        view.changes = failure_memory.changes(parent_source, view.source)
        return view

    async def advice(self) -> list[str]:
        """The meta-summarizer's advice, read at most every few seconds."""
        at, items = self.recommendations
        if time.monotonic() - at > RECOMMENDATIONS_EVERY_S:
            row = await self.store.fetchone(
                "SELECT value_json FROM run_state WHERE run_id=? AND key='recommendations'", (self.run_id,)
            )
            items = json.loads(row["value_json"]) if row else []
            self.recommendations = (time.monotonic(), items)
        return items

    def pick_parent(self, island: int, rng: random.Random) -> tuple[Cand | None, list[Cand]]:
        """A parent drawn from the island's eligible members (or any eligible candidate while the island
        has none), and that pool, best first."""
        eligible = self.population.eligible
        pool = [eligible[m] for m in self.islands.islands[island].members if m in eligible]
        if not pool:
            pool = list(eligible.values())
        if not pool:
            return None, pool
        pool.sort(key=fitness, reverse=True)  # stable: equal fitness keeps membership order
        if self.config.parent_selection == "weighted":
            return weighted(pool, [fitness(c) for c in pool], rng, [c.children for c in pool]), pool
        return pool[power_law_rank(len(pool), rng, self.config.power_law_alpha)], pool

    def second_parent(self, parent: Cand, rng: random.Random) -> Cand | None:
        """Any other eligible candidate, uniformly (drawn again when the draw is the parent)."""
        if len(self.population.eligible) - (parent.id in self.population.eligible) == 0:
            return None
        ids = list(self.population.eligible)
        while True:
            pick = self.population.eligible[rng.choice(ids)]
            if pick is not parent:
                return pick

    async def draw(
        self, number: int, evaluated: Callable[[], int], phase: Callable[[], str], with_failures: bool
    ) -> Draw:
        """The context of one proposal; `number` (the next candidate number when it was started, counting
        proposals in flight) seeds its draws and picks its island; `evaluated` and `phase` are read as the context
        is made. NotReady when no parent can be chosen."""
        self.attempt += 1  # a retry after a duplicate must not replay the same draw
        rng = random.Random(f"{self.config.seed}:{self.run_id}:{number}:{self.attempt}")
        island = self.islands.pick_island(number)
        parent, pool = self.pick_parent(island, rng)
        if parent is None:
            raise NotReady()
        cands = self.population.cands
        # the island's best (its members, migrants included), then elites of other cells
        inspirations = [c for c in pool[: self.config.top_inspirations + 1] if c is not parent]
        inspirations = inspirations[: self.config.top_inspirations]
        archive_ids = [e.candidate_id for e in self.population.archive.elites() if e.candidate_id != parent.id]
        rng.shuffle(archive_ids)
        inspirations += [
            cands[i] for i in archive_ids[: self.config.archive_inspirations] if cands[i] not in inspirations
        ]
        second = self.second_parent(parent, rng)
        rejected_views = []
        for cid in sorted(self.population.rejected)[-REJECTED_IN_PROMPT:]:
            v = self.view(self.population.rejected[cid])
            v.reject_reason = self.population.rejected[cid].reject_reason
            rejected_views.append(v)
        recs = await self.advice()
        ctx = ProposalContext(
            run_id=self.run_id,
            workload=self.workload,
            parent=self.view(parent),
            inspirations=[self.view(c) for c in inspirations],
            second_parent=self.view(second) if second else None,
            rejected=rejected_views,
            island_sources=[
                self.source_of(cands[m].source_hash)
                for m in self.islands.islands[island].members[-ISLAND_SOURCES:]
                if m in cands
            ],
            phase=phase(),
            rng=rng,
            evaluation_number=evaluated(),
            store=self.store,
            recommendations=recs,
            known=lambda source: hashlib.sha256(source.encode()).hexdigest() in self.population.by_hash,
        )
        if with_failures:  # failure memory is for a model to read
            ctx.failures = [self.failure_view(c) for c in recent_failures(cands.values(), island)]
            unrepaired = recent_failures(cands.values(), island, exclude=lambda c: c.children > 0)
            ctx.repairable = [self.failure_view(c) for c in unrepaired]
        return Draw(ctx, parent, island)

    async def parent_of(self, draw: Draw, proposal: Proposal) -> Cand | None:
        """The new child's parent (the draw's, or the failed child a repair mends), or None when the proposal is
        refused: edits outside its EVOLVE-BLOCKs (logged), or a source the run already has."""
        try:
            blocks.validate_child(self.workload.seed_source, proposal.source)
        except blocks.BlockError as exc:
            await self.store.event(
                self.run_id, Log(level="warning", message=f"proposal from {proposal.mutator} rejected: {exc}")
            )
            return None
        parent = draw.parent
        if proposal.parent_id is not None and proposal.parent_id in self.population.cands:
            parent = self.population.cands[proposal.parent_id]  # a repair: the failed child is the parent
        await self.store.reserve_candidate_ids()
        if hashlib.sha256(proposal.source.encode()).hexdigest() in self.population.by_hash:
            return None  # a duplicate (checked after the last await: proposals run side by side)
        return parent
