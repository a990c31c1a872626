"""The engine: one run's evolutionary loop and its control operations. Its jobs are modules of engine/run/:
opening (executor, mutator), restore, proposer, roster (births, results), evaluations, migration, stop rules,
the finalists step; this module runs the loop over them.

Everything it knows is persisted before it acts on it: a proposal is a `pending` candidate row before its first
job starts, a result is written with its evaluation rows in one transaction. After a crash, `Engine.load`
rebuilds islands, archive and counters from the store and evaluates what was pending: nothing is lost and
nothing finished is evaluated again."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any

from remote.errors import InputError
from remote.jobs import Executor

from ..config import RunConfig
from ..contract import Log
from ..evaluation import fault_policy
from ..evaluation.evaluation import EvalOutcome
from ..search.archive import Archive
from ..search.islands import IslandModel
from ..search.mutators.base import Mutator, Proposal
from ..search.mutators.design_space import DesignSpaceMutator
from ..search.population import Cand, Population
from ..store import counting
from ..store.store import Store
from ..workload import Workload, load_workload
from . import control, mutator_hooks
from .evaluations import Evaluations
from .finalist_step import before_the_end
from .ledger import Ledger
from .migration import Migrations
from .opening import closed_on_failure, default_executor, llm_mutator, reconcile, sized
from .proposal_tasks import ProposalTasks
from .proposer import Proposer
from .restore import evaluations_since_best, restore
from .roster import Roster
from .status import run_status
from .stop_rules import final_state, phase, stop_condition, why_no_parent

TICK_S = 0.5
PROPOSAL_WAIT_S = 60.0  # the design-space mutator answers in milliseconds; a bound, not a pace


class Engine:
    def __init__(self, store: Store, run_id: str, workload: Workload, config: RunConfig, executor: Executor):
        workload = sized(workload, config)
        self.store = store
        self.run_id = run_id
        self.workload = workload
        self.config = config
        self.executor = executor
        self.state = "running"
        self.stop_reason = ""
        self.population = Population()
        self.islands = IslandModel(config.islands)
        self.elapsed_before = 0.0
        self.started = time.monotonic()
        self.llm_cost = 0.0
        self.mutator: Mutator = DesignSpaceMutator(workload.design_space, workload.seed_source)
        self._wake = asyncio.Event()
        self._resume = asyncio.Event()
        self._resume.set()
        self._stop = False
        self._owns_executor = False
        self.ledger = Ledger(store, run_id, on_error=self._wake.set)
        executor.watch_submissions(self.ledger.job_submitted)  # a scheduler's job ids (Slurm) go to jobs.external_id
        self.exit_when_paused = False  # headless: a run that pauses itself ends, paused (`cuco resume`)
        self._paused_itself = False
        self.proposals = ProposalTasks(
            on_done=self._wake.set, stop_calls=lambda: mutator_hooks.cancel_calls(self.mutator)
        )
        self.roster = Roster(store, workload, self.ledger, self.population, self.islands)
        self.evaluations = Evaluations(run_id, workload, executor, self.ledger, self._would_be_best, self._wake.set)
        self.migrations = Migrations(store, run_id, self.islands, config.migration_interval, config.migration_size)
        self.proposer = Proposer(run_id, workload, config, store, self.population, self.islands, self.roster.source)

    # ----- construction -------------------------------------------------------------------------

    @classmethod
    async def create(
        cls, home: Path, workload: Workload, config: RunConfig, *, run_id: str, executor: Executor | None = None
    ) -> Engine:
        config.validate()
        owns = executor is None
        # The executor first: a cluster nobody can reach, or no node with the GPUs the jobs need, must not
        # leave a run behind.
        executor = executor or await default_executor(home, config, sized(workload, config))
        store = await Store(home).open()
        async with closed_on_failure(store, lambda: executor, owns):
            engine = cls(store, run_id, workload, config, executor)
            engine._owns_executor = owns
            engine.mutator = llm_mutator(config, workload, home) or engine.mutator  # one that cannot start: no run
            await control.create_run(store, run_id, workload, config)
            await engine._add_seed()
        return engine

    @classmethod
    async def load(cls, home: Path, run_id: str, executor: Executor | None = None) -> Engine:
        store = await Store(home).open()
        owns = executor is None
        async with closed_on_failure(store, lambda: executor, owns):
            row = await store.fetchone("SELECT * FROM runs WHERE id=?", (run_id,))
            if row is None:
                raise InputError("RUN", run_id, "no such run (see `cuco ls`)")
            config = RunConfig.from_json(row["config_json"])
            workload = load_workload(row["workload_path"])
            executor = executor or await default_executor(home, config, sized(workload, config))
            engine = cls(store, run_id, workload, config, executor)
            engine._owns_executor = owns
            engine.elapsed_before = row["elapsed_s"] or 0.0
            engine.roster.baseline_ms = row["baseline_time_ms"]
            engine.mutator = llm_mutator(config, workload, home) or engine.mutator
            await engine._rebuild()
            if not engine.cands:  # killed between the run's row and its seed's: the seed is all it lacks
                await engine._add_seed()
            await reconcile(engine.executor, engine.cands.values(), run_id)
        return engine

    async def _add_seed(self) -> None:
        await self.store.reserve_candidate_ids()
        await self.roster.persisted(self.roster.born(Proposal(self.workload.seed_source, "seed", "seed"), None, 0))

    async def _rebuild(self) -> None:
        restored = await restore(self.store, self.run_id, self.population, self.islands, self.roster.account)
        self.migrations.last_at, self.llm_cost = restored.last_migration_at, restored.llm_cost
        self.roster.since_best = evaluations_since_best(self.cands.values(), self.best)

    # ----- the population, read ------------------------------------------------------------------

    @property
    def cands(self) -> dict[int, Cand]:
        return self.population.cands

    @property
    def best(self) -> Cand | None:
        return self.population.best

    @property
    def archive(self) -> Archive:
        return self.population.archive

    # ----- counters -----------------------------------------------------------------------------

    @property
    def evaluated(self) -> int:
        return self.roster.evaluated

    def elapsed_s(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.started)

    def status(self) -> dict[str, Any]:
        return run_status(
            self.run_id,
            self.workload.name,
            self.state,
            self.cands,
            self.best,
            len(self.evaluations),
            self.llm_cost,
            self.elapsed_s(),
            self.executor,
            self.islands,
        )

    # ----- control --------------------------------------------------------------------------------

    async def pause(self, hard: bool = False) -> None:
        if self.state in ("finished", "failed", "stopped"):
            return
        self._resume.clear()
        self.state = "paused"
        await control.set_state(self.store, self.run_id, "paused", "hard pause" if hard else "paused by the user")
        if hard:
            await self.evaluations.cancel()
        self._wake.set()

    async def resume(self) -> None:
        if self.state != "paused":
            return
        self.state = "running"
        await control.set_state(self.store, self.run_id, "running", "resumed by the user")
        self._resume.set()
        self._wake.set()

    async def stop(self) -> None:
        self._stop = True
        self.stop_reason = self.stop_reason or "stopped by the user"
        self._resume.set()
        self._wake.set()

    async def accept(self, candidate_id: int, note: str = "") -> None:
        await control.accept(self.store, self.run_id, candidate_id, note)
        c = self.cands.get(candidate_id)
        if c is not None:
            self.population.accept(c)

    async def reject(self, candidate_id: int, reason: str) -> None:
        await control.reject(self.store, self.run_id, candidate_id, reason)
        c = self.cands.get(candidate_id)
        if c is not None:
            self.population.reject(c, reason)

    async def mark_strategy(self, verdict: str, strategy: str | None = None, text: str = "") -> None:
        """Pin, unpin, retire or add a strategy: the LLM mutator folds the mark in before its next proposal."""
        await control.mark_strategy(self.store, self.run_id, verdict, strategy, text)

    async def fork(
        self, from_candidate: int | None = None, name: str | None = None, overrides: dict | None = None
    ) -> str:
        return await control.fork(self.store, self.run_id, from_candidate, name, overrides)

    async def close(self) -> None:
        await self.evaluations.cancel()
        await mutator_hooks.close(self.mutator)
        if self._owns_executor:
            await asyncio.wait_for(self.executor.close(), 60)
        await self.store.close()

    # ----- the loop -----------------------------------------------------------------------------

    def _stop_condition(self) -> str | None:
        return stop_condition(self.config, self.evaluated, self.elapsed_s(), self.best, self.roster.since_best)

    def _may_propose(self) -> bool:
        if self._stop or not self._resume.is_set():
            return False
        busy = len(self.evaluations) + len(self.proposals)
        if busy >= self.config.concurrency:
            return False
        queued = busy + len(self.roster.pending_idle())
        if self.config.max_evals is not None and self.evaluated + queued >= self.config.max_evals:
            return False
        return not self.roster.waiting

    def _take_proposals(self, empty: int) -> tuple[str | None, int, bool]:
        intake = self.proposals.take(
            empty,
            self._offer,
            idle=lambda: not self.evaluations and not self.proposals,
            no_parent=lambda: why_no_parent(self.cands.values()),
        )
        if intake.stop_reason is not None:
            self.stop_reason = intake.stop_reason
        return intake.stop_reason, intake.empty, intake.blocked

    def _offer(self, cand: Cand) -> None:
        """A new child starts now, or waits, pending, while paused, stopping or at `concurrency`."""
        # the pending pass may have started it already (it waits in `roster.waiting` from its birth)
        started = cand.id not in self.roster.waiting or cand.id in self.evaluations
        if not started and not self._stop and self._resume.is_set() and len(self.evaluations) < self.config.concurrency:
            self._start_evaluation(cand)

    async def run(self) -> str:
        """Run until a stop condition or stop(); returns the final state."""
        if self.state != "paused":
            self.state = "running"
            await control.set_state(self.store, self.run_id, "running", "started")
        empty = 0
        try:
            while not self._stop:
                reason = self._stop_condition()
                if reason and self.proposals:
                    await self.proposals.cancel()
                if reason and not self.evaluations:
                    self.stop_reason = reason
                    break
                # Pending candidates first (left by a restart or a hard pause), then new proposals.
                for c in self.roster.pending_idle():
                    if not self._resume.is_set() or len(self.evaluations) >= self.config.concurrency:
                        break
                    self._start_evaluation(c)
                blocked = False
                while reason is None and not blocked and self._may_propose():
                    task = self.proposals.start(self._propose(self.roster.next_number + len(self.proposals)))
                    if isinstance(self.mutator, DesignSpaceMutator):  # answers at once: proposals stay in order
                        await asyncio.wait({task}, timeout=PROPOSAL_WAIT_S)
                    # let due writes go out (and the jobs they hold back start) during a burst of proposals
                    await asyncio.sleep(0)
                    reason, empty, blocked = self._take_proposals(empty)
                if reason is None:
                    reason, empty, _ = self._take_proposals(empty)
                if reason is not None and self.proposals:
                    await self.proposals.cancel()  # a stop never waits on a model
                if reason and not self.evaluations:
                    self.stop_reason = reason
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), TICK_S)
                except TimeoutError:
                    pass
                if self.ledger.error is not None:
                    raise self.ledger.error
                await self.migrations.maybe(self.cands, self.evaluated)
            if not self._stop:  # the finalists and the seed measured again, side by side (engine/run/finalist_step.py)
                await before_the_end(
                    self.population,
                    lambda c: self.roster.source(c.source_hash),
                    self.workload,
                    self.executor,
                    self.evaluations.frozen,
                    self.ledger,
                    self.run_id,
                    self._log,
                )
            final = final_state(self._stop, self._paused_itself, {c.status for c in self.cands.values()})
        except Exception as exc:  # the run fails (or pauses itself: a full disk); the store keeps what it had
            final, self.stop_reason = fault_policy.end_state(exc)
            await fault_policy.quietly(self._log("error", self.stop_reason))
        await self.proposals.cancel()
        await self.evaluations.cancel()
        try:
            await self.ledger.elapsed(self.elapsed_s())  # also sends every write still queued
        except Exception as exc:
            final, self.stop_reason = fault_policy.end_state(exc)
            if final == "failed":
                raise
        await mutator_hooks.settle(self.mutator, self.store, self.run_id)  # now that the children's rows are written
        if self.ledger.error is not None and final not in ("failed", "paused"):
            final, self.stop_reason = fault_policy.end_state(self.ledger.error)
            await fault_policy.quietly(self._log("error", self.stop_reason))
        self.state = final
        # a store that cannot take even this keeps the run 'running': `cuco resume` restarts it all the same
        await fault_policy.quietly(control.set_state(self.store, self.run_id, final, self.stop_reason))
        return final

    async def _pause_itself(self, reason: str) -> None:
        """An environment fault persists: the run pauses (a headless one ends, paused) with the reason."""
        if self._stop or self.state == "paused":
            return
        if self.exit_when_paused:
            self._paused_itself, self._stop, self.stop_reason = True, True, reason
        else:
            self._resume.clear()
            self.state = "paused"
            await fault_policy.quietly(control.set_state(self.store, self.run_id, "paused", reason))
        self._wake.set()

    async def _log(self, level: str, message: str) -> None:
        await self.store.event(self.run_id, Log(level=level, message=message))

    # ----- proposals --------------------------------------------------------------------------

    async def _propose(self, number: int) -> Cand | None:
        """One proposal (engine/run/proposer.py draws its context): validated, deduplicated, registered."""
        draw = await self.proposer.draw(
            number,
            lambda: self.evaluated,
            lambda: phase(self.config, self.evaluated, self.elapsed_s()),
            with_failures=not isinstance(self.mutator, DesignSpaceMutator),  # failure memory is for a model to read
        )
        proposal = await self.mutator.propose(draw.context)
        parent = None if proposal is None else await self.proposer.parent_of(draw, proposal)
        if proposal is None or parent is None:
            return None
        parent.children += 1
        return self.roster.born(proposal, parent, draw.island, self.roster.next_number)

    # ----- evaluation -------------------------------------------------------------------------

    def _start_evaluation(self, c: Cand) -> None:
        if c.id in self.evaluations:  # never twice at once: a second run would count it twice
            return
        self.roster.waiting.discard(c.id)
        self.evaluations.start(c.id, functools.partial(self._evaluate, c))

    async def _evaluate(self, c: Cand) -> None:
        await self.roster.persisted(c)
        try:
            outcome = await self.evaluations.outcome(
                c, self.roster.source(c.source_hash), lambda out, decision: self._environment_fault(c, out, decision)
            )
        except asyncio.CancelledError:
            # Cancelled (pause --hard, stop): the candidate stays pending and is evaluated on resume. On a full
            # disk the store keeps it 'running', which a restart reads as pending all the same.
            await asyncio.shield(fault_policy.quietly(self.roster.back_to_pending(c)))
            raise
        if outcome is not None:  # None: the run paused itself on the environment; the candidate waits
            self.roster.record(c, outcome, self.elapsed_s())

    async def _environment_fault(self, c: Cand, outcome: EvalOutcome, decision: fault_policy.Decision) -> None:
        """Not the candidate's doing: the stage is kept for the report, and the candidate waits, pending,
        when the run pauses."""
        paused = decision.action == fault_policy.PAUSE
        if paused:
            await self._pause_itself(decision.reason)  # first: nothing restarts the candidate meanwhile
            self.roster.waits(c)
        self.ledger.environment_fault(c, outcome, decision, paused)

    def _would_be_best(self, speedup: float) -> bool:
        return self.config.reverify_best and counting.remeasure_before_best(
            speedup, None if self.best is None else (self.best.speedup or 0)
        )
