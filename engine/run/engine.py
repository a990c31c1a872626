"""The engine: one run's evolutionary loop, its control operations and its events.

Everything it knows is persisted before it acts on it: a proposal is a `pending` candidate row before
its first job starts, a result is written with its evaluation rows in one transaction. After a crash,
`Engine.load` rebuilds islands, archive and counters from the store and evaluates what was pending:
nothing is lost and nothing finished is evaluated again.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any

from remote.errors import InputError
from remote.jobs import Executor

from .. import blocks, stages
from ..candidate_view import CandidateView
from ..config import RunConfig
from ..contract import BestRef, Log, Migration, RunState, config_results, configs_from_benchmark, interval_of
from ..evaluation import fault_policy
from ..evaluation.evaluation import EvalOutcome, FrozenObjectCache, StageRecord, evaluate_source, fresh_seed, trim
from ..evaluation.executors import open_executor  # the one rule shared with `cuco transform`
from ..llm import failure_memory, spread
from ..llm.budget import BudgetExhausted
from ..search import ranking
from ..search.archive import Archive
from ..search.islands import IslandModel
from ..search.mutators.base import Mutator, Proposal, ProposalContext
from ..search.mutators.design_space import DesignSpaceMutator
from ..search.mutators.llm import build_llm_mutator, settings_from_config
from ..search.population import Cand, Population, recent_failures
from ..search.population import fitness as _fitness
from ..search.selection import power_law_rank, weighted
from ..store import counting
from ..store.schema import DONE, FAILED, FINAL_STATUSES, INCORRECT, PENDING, RUNNING
from ..store.store import Store
from ..workload import Workload, load_workload
from . import control
from .finalist_step import remeasure_finalists
from .ledger import Ledger
from .proposal_tasks import ProposalTasks

TICK_S = 0.5
PROPOSAL_WAIT_S = 60.0  # the design-space mutator answers in milliseconds; a bound, not a pace
MAX_EMPTY_PROPOSALS = 40  # consecutive proposals that were duplicates or invalid before giving up
REJECTED_IN_PROMPT = 5


class _NotReady(Exception):
    """No parent can be chosen yet (the seed, or a fork's generation 0, is still being evaluated)."""


def _sized(workload: Workload, config: RunConfig) -> Workload:
    """The workload as this run's jobs see it (--ranks N picks the configs and GPUs of N ranks)."""
    if config.ranks is not None and config.ranks != workload.ranks:
        return workload.with_ranks(config.ranks)
    return workload


class Engine:
    def __init__(self, store: Store, run_id: str, workload: Workload, config: RunConfig, executor: Executor):
        workload = _sized(workload, config)
        self.store = store
        self.run_id = run_id
        self.workload = workload
        self.config = config
        self.executor = executor
        self.state = "running"
        self.stop_reason = ""
        self.population = Population()
        self.islands = IslandModel(config.islands)
        self.baseline_ms: float | None = None
        self.elapsed_before = 0.0
        self.started = time.monotonic()
        self.since_best = 0
        self.last_migration_at = 0
        self.llm_cost = 0.0
        self.mutator: Mutator = DesignSpaceMutator(workload.design_space, workload.seed_source)
        self._inflight: dict[int, asyncio.Task] = {}
        self._wake = asyncio.Event()
        self._resume = asyncio.Event()
        self._resume.set()
        self._stop = False
        self._owns_executor = False
        self._frozen = FrozenObjectCache()
        self._attempt = 0
        self._n_final = 0  # evaluated in this run (not fork copies)
        self._persisting: dict[int, asyncio.Future] = {}
        self.ledger = Ledger(store, run_id, on_error=self._wake.set)
        executor.watch_submissions(self.ledger.job_submitted)  # a scheduler's job ids (Slurm) go to jobs.external_id
        self._sources: dict[str, str] = {}  # content hash -> source (immutable, so never stale)
        self._recs: tuple[float, list[str]] = (0.0, [])
        self._waiting: set[int] = set()  # pending and not in flight
        self._next_number = 0
        self.faults = fault_policy.FaultPolicy()
        self.exit_when_paused = False  # headless: a run that pauses itself ends, paused (`cuco resume`)
        self._paused_itself = False
        self.proposals = ProposalTasks(on_done=self._wake.set, stop_calls=self._stop_calls)

    # ----- construction -------------------------------------------------------------------------

    @classmethod
    async def create(
        cls, home: Path, workload: Workload, config: RunConfig, *, run_id: str, executor: Executor | None = None
    ) -> Engine:
        config.validate()
        owns = executor is None
        # The executor first: a cluster nobody can reach, or no node with the GPUs the jobs need, must not
        # leave a run behind.
        executor = executor or await cls._default_executor(home, config, _sized(workload, config))
        store = await Store(home).open()
        try:
            engine = cls(store, run_id, workload, config, executor)
            engine._owns_executor = owns
            await engine._setup_mutator(home)  # a mutator that cannot start must not leave a run behind
            now = time.time()
            async with store.transaction() as tx:
                if await tx.fetchone("SELECT id FROM runs WHERE id=?", (run_id,)):
                    raise InputError("--name", "name", f"a run named {run_id!r} already exists (see `cuco ls`)")
                await tx.execute(
                    "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (run_id, workload.name, str(workload.root), "running", config.to_json(), now, now),
                )
                await tx.event(run_id, RunState(state="running", reason="created"))
            await engine._add_seed()
        except BaseException:
            await store.close()
            if owns:
                await asyncio.wait_for(executor.close(), 60)
            raise
        return engine

    @classmethod
    async def load(cls, home: Path, run_id: str, executor: Executor | None = None) -> Engine:
        store = await Store(home).open()
        engine = None
        owns = executor is None
        try:
            row = await store.fetchone("SELECT * FROM runs WHERE id=?", (run_id,))
            if row is None:
                raise InputError("RUN", run_id, "no such run (see `cuco ls`)")
            config = RunConfig.from_json(row["config_json"])
            workload = load_workload(row["workload_path"])
            executor = executor or await cls._default_executor(home, config, _sized(workload, config))
            engine = cls(store, run_id, workload, config, executor)
            engine._owns_executor = owns
            engine.elapsed_before = row["elapsed_s"] or 0.0
            engine.baseline_ms = row["baseline_time_ms"]
            await engine._setup_mutator(home)
            await engine._rebuild()
            if not engine.cands:  # killed between the run's row and its seed's: the seed is all it lacks
                await engine._add_seed()
            keep = {
                job
                for c in engine.cands.values()
                if c.status in (PENDING, RUNNING)
                for job in stages.job_ids(f"{run_id}-c{c.id}")
            }
            await asyncio.wait_for(engine.executor.reconcile(keep, stages.run_jobs_pattern(run_id)), 120)
        except BaseException:
            await store.close()
            if owns and executor is not None:
                await asyncio.wait_for(executor.close(), 60)
            raise
        return engine

    @staticmethod
    async def _default_executor(home: Path, config: RunConfig, workload: Workload) -> Executor:
        return await open_executor(
            Path(home), config.cluster, gpus_per_job=workload.launch_gpus, workload_name=workload.name
        )

    async def _add_seed(self) -> None:
        await self.store.reserve_candidate_ids()
        await self._persisted(
            self._new_candidate(Proposal(self.workload.seed_source, "seed", "seed"), parent=None, island=0)
        )

    async def _setup_mutator(self, home: Path) -> None:
        if self.config.mutator == "llm" or self.config.llm:
            self.mutator = build_llm_mutator(
                self.config.llm,
                self.config.budget_usd,
                self.workload,
                home=Path(home),
                embedding=self.config.embedding,
                settings=settings_from_config(self.config),
            )

    async def _rebuild(self) -> None:
        rows = await self.store.fetchall("SELECT * FROM candidates WHERE run_id=? ORDER BY id", (self.run_id,))
        marks = await self.store.fetchall(
            "SELECT candidate_id, verdict, text FROM marks WHERE run_id=? ORDER BY id", (self.run_id,)
        )
        verdicts = {
            m["candidate_id"]: (None if m["verdict"] == "clear" else m["verdict"], m["text"] or "") for m in marks
        }
        for r in rows:
            c = self._cand_from_row(r)
            c.verdict, text = verdicts.get(c.id, (None, ""))
            if c.verdict == "reject":
                c.reject_reason = text
            if c.status == RUNNING:
                c.status = PENDING
            self.population.load(c)
            self._account(c)
            if r["parent_id"] in self.cands:
                self.cands[r["parent_id"]].children += 1
            # generation 0's first member (the seed, or a fork's chosen candidate) starts every island
            for island in range(len(self.islands)) if c.number == 0 else (c.island,):
                self.islands.add(island, c.id)
        for m in await self.store.fetchall("SELECT * FROM migrations_log WHERE run_id=? ORDER BY id", (self.run_id,)):
            self.islands.add(m["dst_island"], m["candidate_id"])
            self.islands.islands[m["dst_island"]].last_migration = m["at_evaluation"]
            self.last_migration_at = max(self.last_migration_at, m["at_evaluation"])
        cost = await self.store.fetchone(
            "SELECT COALESCE(SUM(cost_usd), 0) AS c FROM llm_calls WHERE run_id=?", (self.run_id,)
        )
        self.llm_cost = float(cost["c"]) if cost else 0.0
        # patience counts evaluations since the best, in the order they finished
        done = sorted(
            (c for c in self.cands.values() if c.status in FINAL_STATUSES and not c.forked), key=lambda c: c.id
        )
        if self.best is not None:
            self.since_best = sum(1 for c in done if c.id > self.best.id)

    @staticmethod
    def _cand_from_row(r: dict) -> Cand:
        return Cand(
            id=r["id"],
            number=r["number"],
            island=r["island"],
            generation=r["generation"],
            status=r["status"],
            source_hash=r["source_hash"],
            descriptor=json.loads(r["descriptor_json"]),
            cell=r["cell"],
            operator=r["operator"],
            fitness=r["fitness"],
            speedup=r["speedup"],
            time_ms=r["time_ms"],
            reason=r["reason"] or "",
            metrics=json.loads(r["metrics_json"]) if r["metrics_json"] else {},
            forked=r["origin_id"] is not None,
            review=r["review"],
            parent_id=r["parent_id"],
        )

    def _account(self, c: Cand) -> None:
        """Fold a candidate loaded from the store into the counters."""
        self._next_number = max(self._next_number, c.number + 1)
        if c.status in FINAL_STATUSES and not c.forked:
            self._n_final += 1
        if c.status in (PENDING, RUNNING):
            self._waiting.add(c.id)

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

    @property
    def by_hash(self) -> set[str]:
        return self.population.by_hash

    # ----- counters -----------------------------------------------------------------------------

    @property
    def evaluated(self) -> int:
        return self._n_final

    def elapsed_s(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.started)

    def status(self) -> dict[str, Any]:
        finals = [c for c in self.cands.values() if c.status in FINAL_STATUSES and not c.forked]
        return {
            "run": self.run_id,
            "workload": self.workload.name,
            "state": self.state,
            "evaluated": len(finals),
            "correct": sum(c.status == DONE for c in finals),
            "failed": sum(c.status in (FAILED, INCORRECT) for c in finals),
            "in_flight": len(self._inflight),
            "best": None
            if self.best is None
            else BestRef(
                self.best.id,
                self.best.speedup,
                self.best.time_ms,
                interval_of(self.best.metrics.get("speedup_interval")),
                bool(self.best.metrics.get("remeasured")),
            ).as_dict(),
            "llm_cost_usd": self.llm_cost,
            "elapsed_s": self.elapsed_s(),
            "nodes": [vars(n) for n in self.executor.nodes()],
            "islands": [
                {
                    "index": i.index,
                    "size": len(i.members),
                    "last_migration": i.last_migration,
                    "best": max(
                        (self.cands[m].fitness or 0 for m in i.members if m in self.cands and self.cands[m].eligible),
                        default=None,
                    ),
                }
                for i in self.islands.islands
            ],
        }

    # ----- control --------------------------------------------------------------------------------

    async def pause(self, hard: bool = False) -> None:
        if self.state in ("finished", "failed", "stopped"):
            return
        self._resume.clear()
        self.state = "paused"
        await control.set_state(self.store, self.run_id, "paused", "hard pause" if hard else "paused by the user")
        if hard:
            await self._cancel_inflight()
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
        await self._cancel_inflight()
        closer = getattr(self.mutator, "close", None)
        if closer is not None:
            await asyncio.wait_for(closer(), 30)
        if self._owns_executor:
            await asyncio.wait_for(self.executor.close(), 60)
        await self.store.close()

    async def _cancel_inflight(self) -> None:
        tasks = list(self._inflight.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=30)

    # ----- the loop -----------------------------------------------------------------------------

    def _stop_condition(self) -> str | None:
        c = self.config
        if c.max_evals is not None and self.evaluated >= c.max_evals:
            return f"reached {c.max_evals} evaluations"
        if c.max_minutes is not None and self.elapsed_s() >= c.max_minutes * 60:
            return f"reached {c.max_minutes:g} minutes"
        if c.target_speedup is not None and self.best is not None and (self.best.speedup or 0) >= c.target_speedup:
            return f"reached the target speedup {c.target_speedup:g}x"
        if c.patience is not None and self.since_best >= c.patience:
            return f"no new best in {c.patience} evaluations"
        return None

    def _pending_idle(self) -> list[Cand]:
        return [self.cands[i] for i in sorted(self._waiting)]

    def _may_propose(self) -> bool:
        if self._stop or not self._resume.is_set():
            return False
        busy = len(self._inflight) + len(self.proposals)
        if busy >= self.config.concurrency:
            return False
        queued = busy + len(self._pending_idle())
        if self.config.max_evals is not None and self.evaluated + queued >= self.config.max_evals:
            return False
        return not self._waiting

    def _stop_calls(self) -> None:
        stop = getattr(self.mutator, "cancel_calls", None)  # an LLM mutator's requests in flight
        if stop is not None:
            stop()

    def _take_proposals(self, empty: int) -> tuple[str | None, int, bool]:
        """Fold in the proposals that finished: a child starts (or waits, pending, while paused or stopping).
        Returns a stop reason if one came of them, the count of empty proposals in a row, and whether no
        parent could be chosen yet (no proposal is worth starting until an evaluation ends)."""
        blocked = False
        for done in self.proposals.finished():
            try:
                cand = done.result()
            except BudgetExhausted as exc:
                self.stop_reason = f"LLM budget spent ({exc})" if str(exc) else "LLM budget spent"
                return self.stop_reason, empty, True
            except _NotReady:
                if not self._inflight and not self.proposals:
                    self.stop_reason = self._why_no_parent()
                    return self.stop_reason, empty, True
                blocked = True
                continue
            if cand is None:
                empty += 1
                if empty >= MAX_EMPTY_PROPOSALS:
                    self.stop_reason = "no new candidate could be proposed (design space exhausted)"
                    return self.stop_reason, empty, True
                continue
            empty = 0
            # the pending pass may have started it already (it waits in `_waiting` from its birth)
            started = cand.id not in self._waiting or cand.id in self._inflight
            if (
                not started
                and not self._stop
                and self._resume.is_set()
                and len(self._inflight) < self.config.concurrency
            ):
                self._start_evaluation(cand)
        return None, empty, blocked

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
                if reason and not self._inflight:
                    self.stop_reason = reason
                    break
                # Pending candidates first (left by a restart or a hard pause), then new proposals.
                for c in self._pending_idle():
                    if not self._resume.is_set() or len(self._inflight) >= self.config.concurrency:
                        break
                    self._start_evaluation(c)
                blocked = False
                while reason is None and not blocked and self._may_propose():
                    task = self.proposals.start(self._propose(self._next_number + len(self.proposals)))
                    if isinstance(self.mutator, DesignSpaceMutator):  # answers at once: proposals stay in order
                        await asyncio.wait({task}, timeout=PROPOSAL_WAIT_S)
                    # let due writes go out (and the jobs they hold back start) during a burst of proposals
                    await asyncio.sleep(0)
                    reason, empty, blocked = self._take_proposals(empty)
                if reason is None:
                    reason, empty, _ = self._take_proposals(empty)
                if reason is not None and self.proposals:
                    await self.proposals.cancel()  # a stop never waits on a model
                if reason and not self._inflight:
                    self.stop_reason = reason
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), TICK_S)
                except TimeoutError:
                    pass
                if self.ledger.error is not None:
                    raise self.ledger.error
                await self._maybe_migrate()
            if not self._stop:
                await self._remeasure_finalists()
            final = ("paused" if self._paused_itself else "stopped") if self._stop else "finished"
            statuses = {c.status for c in self.cands.values()}
            if not self._stop and statuses & set(FINAL_STATUSES) and DONE not in statuses:
                final = "failed"  # evaluated, and not one correct candidate (the seed's included): nothing to search
        except Exception as exc:  # the run fails (or pauses itself: a full disk); the store keeps what it had
            final, self.stop_reason = fault_policy.end_state(exc)
            await fault_policy.quietly(self._log("error", self.stop_reason))
        await self.proposals.cancel()
        await self._cancel_inflight()
        try:
            await self._persist_elapsed()  # also sends every write still queued
        except Exception as exc:
            final, self.stop_reason = fault_policy.end_state(exc)
            if final == "failed":
                raise
        # the last children's credit (an LLM mutator's), now that their rows are written
        settle = getattr(self.mutator, "settle", None)
        if settle is not None:
            await fault_policy.quietly(asyncio.wait_for(settle(self.store, self.run_id), 60))
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

    async def _persist_elapsed(self) -> None:
        await self.ledger.elapsed(self.elapsed_s())

    async def _log(self, level: str, message: str) -> None:
        await self.store.event(self.run_id, Log(level=level, message=message))

    # ----- proposals --------------------------------------------------------------------------

    def _view(self, c: Cand) -> CandidateView:
        public = {cfg.name for cfg in self.workload.public_configs}
        bench = config_results(c.metrics) if configs_from_benchmark(c.metrics) else []
        return CandidateView(
            id=c.id,
            source=self._source(c.source_hash),
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

    def _failure_view(self, c: Cand) -> CandidateView:
        """A failed child as failure memory shows it: the whole feedback (the log), and its diff."""
        view = self._view(c)
        view.feedback, view.reason = str(c.metrics.get("feedback") or c.reason), c.reason
        parent = self.cands.get(c.parent_id) if c.parent_id is not None else None
        parent_source = self._source(parent.source_hash) if parent is not None else None
        view.changes = failure_memory.changes(parent_source, view.source)
        return view

    def _phase(self) -> str:
        if self.config.max_evals:
            return "explore" if self.evaluated < self.config.explore_fraction * self.config.max_evals else "exploit"
        if self.config.max_minutes:
            return (
                "explore"
                if self.elapsed_s() < self.config.explore_fraction * self.config.max_minutes * 60
                else "exploit"
            )
        return "explore" if self.evaluated < 16 else "exploit"

    async def _recommendations(self) -> list[str]:
        """The meta-summarizer's advice, read at most every few seconds (it changes every N evaluations)."""
        at, items = self._recs
        if time.monotonic() - at > 5.0:
            row = await self.store.fetchone(
                "SELECT value_json FROM run_state WHERE run_id=? AND key='recommendations'", (self.run_id,)
            )
            items = json.loads(row["value_json"]) if row else []
            self._recs = (time.monotonic(), items)
        return items

    def _pick_parent(self, island: int, rng: random.Random) -> tuple[Cand | None, list[Cand]]:
        """A parent drawn from the island's eligible members (or any eligible candidate while the island
        has none), and that pool, best first."""
        eligible = self.population.eligible
        pool = [eligible[m] for m in self.islands.islands[island].members if m in eligible]
        if not pool:
            pool = list(eligible.values())
        if not pool:
            return None, pool
        pool.sort(key=_fitness, reverse=True)  # stable: equal fitness keeps membership order
        if self.config.parent_selection == "weighted":
            return weighted(pool, [_fitness(c) for c in pool], rng, [c.children for c in pool]), pool
        return pool[power_law_rank(len(pool), rng, self.config.power_law_alpha)], pool

    def _second_parent(self, parent: Cand, rng: random.Random) -> Cand | None:
        """Any other eligible candidate, uniformly (drawn again when the draw is the parent)."""
        if len(self.population.eligible) - (parent.id in self.population.eligible) == 0:
            return None
        ids = list(self.population.eligible)
        while True:
            pick = self.population.eligible[rng.choice(ids)]
            if pick is not parent:
                return pick

    async def _remeasure_finalists(self) -> None:
        """The finalists and the seed, side by side in fresh jobs, before the run ends (engine/run/finalist_step.py)."""
        seed = min((c for c in self.cands.values() if c.operator == "seed"), key=lambda c: c.id, default=None)
        try:
            changed = await remeasure_finalists(
                self.population,
                None if seed is None else seed.id,
                lambda c: self._source(c.source_hash),
                self.workload,
                self.executor,
                self._frozen,
                self.ledger,
                f"{self.run_id}-final",
            )
        except (OSError, RuntimeError, ValueError) as exc:  # the search's numbers stand
            await self._log("warning", f"the finalists could not be re-measured: {exc}")
            return
        if changed:
            ids = ", ".join(f"#{c.id}" for c in changed)
            await self._log("info", f"re-measured side by side before the end: {ids}")

    def _why_no_parent(self) -> str:
        done = [c for c in self.cands.values() if c.status == DONE]
        if done and all(c.verdict == "reject" for c in done):
            return "no candidate to evolve from (every correct candidate is rejected)"
        if done:
            held = sorted(c.id for c in done if c.review == counting.NEEDS_REVIEW and c.verdict != "reject")
            return (
                "no candidate to evolve from: every correct candidate is rejected or waits for review "
                f"({', '.join(f'#{i}' for i in held)}: `cuco accept` one to go on)"
            )
        seed = min(self.cands.values(), key=lambda c: c.id, default=None)
        text = (seed.reason or "").strip() if seed is not None else ""
        why = f": {text.splitlines()[0][:200]}" if text else ""
        return f"no correct candidate to evolve from (the seed failed{why})"

    async def _propose(self, number: int) -> Cand | None:
        """One proposal; `number` (the next candidate number when it was started, counting proposals in
        flight) seeds its draws and picks its island."""
        self._attempt += 1  # a retry after a duplicate must not replay the same draw
        rng = random.Random(f"{self.config.seed}:{self.run_id}:{number}:{self._attempt}")
        island = self.islands.pick_island(number)
        parent, pool = self._pick_parent(island, rng)
        if parent is None:
            raise _NotReady()
        # the island's best (its members, migrants included), then elites of other cells
        inspirations = [c for c in pool[: self.config.top_inspirations + 1] if c is not parent]
        inspirations = inspirations[: self.config.top_inspirations]
        archive_ids = [e.candidate_id for e in self.archive.elites() if e.candidate_id != parent.id]
        rng.shuffle(archive_ids)
        inspirations += [
            self.cands[i] for i in archive_ids[: self.config.archive_inspirations] if self.cands[i] not in inspirations
        ]
        second = self._second_parent(parent, rng)
        rejected_views = []
        for cid in sorted(self.population.rejected)[-REJECTED_IN_PROMPT:]:
            v = self._view(self.population.rejected[cid])
            v.reject_reason = self.population.rejected[cid].reject_reason
            rejected_views.append(v)
        recs = await self._recommendations()
        ctx = ProposalContext(
            run_id=self.run_id,
            workload=self.workload,
            parent=self._view(parent),
            inspirations=[self._view(c) for c in inspirations],
            second_parent=self._view(second) if second else None,
            rejected=rejected_views,
            island_sources=[
                self._source(self.cands[m].source_hash)
                for m in self.islands.islands[island].members[-20:]
                if m in self.cands
            ],
            phase=self._phase(),
            rng=rng,
            evaluation_number=self.evaluated,
            store=self.store,
            recommendations=recs,
            known=lambda source: hashlib.sha256(source.encode()).hexdigest() in self.by_hash,
        )
        if not isinstance(self.mutator, DesignSpaceMutator):  # failure memory is for a model to read
            ctx.failures = [self._failure_view(c) for c in recent_failures(self.cands.values(), island)]
            unrepaired = recent_failures(self.cands.values(), island, exclude=lambda c: c.children > 0)
            ctx.repairable = [self._failure_view(c) for c in unrepaired]
        proposal = await self.mutator.propose(ctx)
        if proposal is None:
            return None
        try:
            blocks.validate_child(self.workload.seed_source, proposal.source)
        except blocks.BlockError as exc:
            await self._log("warning", f"proposal from {proposal.mutator} rejected: {exc}")
            return None
        if proposal.parent_id is not None and proposal.parent_id in self.cands:
            parent = self.cands[proposal.parent_id]  # a repair: the failed child is the parent
        await self.store.reserve_candidate_ids()
        if hashlib.sha256(proposal.source.encode()).hexdigest() in self.by_hash:
            return None  # a duplicate (checked after the last await: proposals run side by side)
        parent.children += 1
        return self._new_candidate(proposal, parent=parent, island=island, number=self._next_number)

    def _new_candidate(self, proposal: Proposal, parent: Cand | None, island: int, number: int = 0) -> Cand:
        """Where a candidate is born: registered in memory, its row queued (the ledger's; the candidate's
        evaluation awaits it first)."""
        space = self.workload.design_space
        descriptor = space.descriptor(proposal.source)
        digest = self.store.blobs.put_text(proposal.source)
        self._sources[digest] = proposal.source
        cell = space.cell(descriptor)
        cid = self.store.next_candidate_id()
        generation = (parent.generation + 1) if parent else 0
        c = Cand(cid, number, island, generation, PENDING, digest, descriptor, cell, proposal.operator)
        c.parent_id = parent.id if parent else None
        self._persisting[cid] = self.ledger.proposed(c, proposal, parent)
        self.population.add(c)
        self._waiting.add(cid)
        self._next_number = max(self._next_number, number + 1)
        if parent is None:  # the seed starts every island
            for i in range(len(self.islands)):
                self.islands.add(i, cid)
        else:
            self.islands.add(island, cid)
        return c

    async def _persisted(self, c: Cand) -> None:
        pending = self._persisting.pop(c.id, None)
        if pending is not None:
            await asyncio.shield(pending)

    def _source(self, digest: str) -> str:
        text = self._sources.get(digest)
        if text is None:
            text = self._sources[digest] = self.store.blobs.get_text(digest)
        return text

    # ----- evaluation -------------------------------------------------------------------------

    def _start_evaluation(self, c: Cand) -> None:
        if c.id in self._inflight:  # never twice at once: a second run would count it twice
            return
        self._waiting.discard(c.id)
        task = asyncio.create_task(self._evaluate(c), name=f"eval-{c.id}")
        self._inflight[c.id] = task
        task.add_done_callback(functools.partial(self._evaluation_ended, c.id))

    def _evaluation_ended(self, cid: int, _task: asyncio.Task) -> None:
        self._inflight.pop(cid, None)
        self._wake.set()

    async def _evaluate(self, c: Cand) -> None:
        await self._persisted(c)
        source = self._source(c.source_hash)
        job_prefix = f"{self.run_id}-c{c.id}"

        async def on_stage(stage: str, rec: StageRecord | None) -> None:
            # A stage's start is written (for viewers); its end is written with the result, after it (FIFO).
            if rec is None:
                first = c.status != RUNNING
                c.status = RUNNING
                self.ledger.stage_started(c, f"{job_prefix}-{stage}", stage, first)

        seed_base = fresh_seed()  # never derived from anything a candidate knows

        def attempt(n: int):  # a retry after an environment fault gets fresh job ids
            return evaluate_source(
                self.workload,
                source,
                self.executor,
                job_prefix=job_prefix + (f"-r{n}" if n else ""),
                seed=seed_base,
                on_stage=on_stage,
                confirm_if=self._would_be_best,
                frozen=self._frozen,
            )

        try:
            outcome = await fault_policy.evaluate_with_retries(
                self.faults, c.id, attempt, lambda out, decision: self._environment_fault(c, out, decision)
            )
        except asyncio.CancelledError:
            # Cancelled (pause --hard, stop): the candidate stays pending and is evaluated on resume. On a full
            # disk the store keeps it 'running', which a restart reads as pending all the same.
            await asyncio.shield(fault_policy.quietly(self._back_to_pending(c)))
            raise
        if outcome is not None:  # None: the run paused itself on the environment; the candidate waits
            self._record(c, outcome)

    async def _environment_fault(self, c: Cand, outcome: EvalOutcome, decision: fault_policy.Decision) -> None:
        """Not the candidate's doing: the stage is kept for the report, and the candidate waits, pending,
        when the run pauses."""
        paused = decision.action == fault_policy.PAUSE
        if paused:
            await self._pause_itself(decision.reason)  # first: nothing restarts the candidate meanwhile
            c.status = PENDING
            self._waiting.add(c.id)
        self.ledger.environment_fault(c, outcome, decision, paused)

    def _would_be_best(self, speedup: float) -> bool:
        return self.config.reverify_best and counting.remeasure_before_best(
            speedup, None if self.best is None else (self.best.speedup or 0)
        )

    async def _back_to_pending(self, c: Cand) -> None:
        c.status = PENDING
        self._waiting.add(c.id)
        await self.ledger.back_to_pending(c)

    def _record(self, c: Cand, outcome: EvalOutcome) -> None:
        """The result: the candidate updated, admitted to the population if it counts, and the ledger's
        rows for it all (written behind: the slot is free for the next candidate at once)."""
        if c.status not in FINAL_STATUSES:
            self._n_final += 1
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
        self.ledger.result(c, outcome, admission, baseline, self.elapsed_s())

    # ----- migration ----------------------------------------------------------------------------

    async def _maybe_migrate(self) -> None:
        n = self.evaluated
        if len(self.islands) < 2 or n - self.last_migration_at < self.config.migration_interval:
            return
        self.last_migration_at = n
        now = time.time()
        async with self.store.transaction() as tx:
            for src, dst in self.islands.edges():
                members = [self.cands[m] for m in self.islands.islands[src].members if m in self.cands]
                elites = sorted((c for c in members if c.eligible), key=lambda c: -(c.fitness or 0))
                dst_members = set(self.islands.islands[dst].members)
                moved = [c for c in elites if c.id not in dst_members][: self.config.migration_size]
                for c in moved:
                    self.islands.add(dst, c.id)
                    self.islands.islands[dst].last_migration = n
                    await tx.insert(
                        "INSERT INTO migrations_log (run_id, src_island, dst_island, candidate_id, at_evaluation, at) "
                        "VALUES (?,?,?,?,?,?)",
                        (self.run_id, src, dst, c.id, n, now),
                    )
                    await tx.event(self.run_id, Migration(src=src, dst=dst, id=c.id))
