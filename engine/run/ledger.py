"""The rows a candidate's life writes: its proposal, each stage's job, an environment fault, its result
(evaluations, verdict, timeline, archive, best), a return to pending.

Writes nobody waits for go out behind the loop, through one FIFO (the store's): anything acted on later is
written later, so a crash loses at most a suffix; the first such write that fails is kept in `error`,
and the run fails on it. The engine decides (engine/search/population.py); the ledger only writes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from ..contract import ArchiveCell, Best, CandidateAdded, CandidateStatus, Log, Result, interval_of
from ..evaluation import fault_policy
from ..evaluation.evaluation import EvalOutcome, trim
from ..search.mutators.base import Proposal
from ..search.population import Admission, Cand
from ..store.schema import DONE, PENDING, RUNNING
from ..store.store import Batch, Store
from . import result_rows


def best_fields(c: Cand) -> dict[str, Any]:
    """The run's new best, its spread, and whether its numbers are a side-by-side re-measurement's."""
    interval = interval_of(c.metrics.get("speedup_interval"))
    return {
        "id": c.id,
        "speedup": c.speedup,
        "time_ms": c.time_ms,
        "speedup_interval": None if interval is None else list(interval),
        "remeasured": bool(c.metrics.get("remeasured")),
    }


class Ledger:
    def __init__(self, store: Store, run_id: str, on_error: Callable[[], None]):
        self.store = store
        self.run_id = run_id
        self.error: BaseException | None = None
        self._on_error = on_error  # wakes the loop, which raises it
        self._writes: set[asyncio.Future] = set()  # write-behind batches not yet committed

    # ----- write-behind ---------------------------------------------------------------------------

    def write_behind(self, batch: Batch, lazy: bool = False) -> None:
        """Submit writes nobody waits for: anything acted on later is written later (one FIFO), so a crash
        loses at most a suffix, and the run fails if such a write does."""
        done = self.store.submit(batch, lazy=lazy)
        self._writes.add(done)
        done.add_done_callback(self._written)

    def _written(self, done: asyncio.Future) -> None:
        self._writes.discard(done)
        if not done.cancelled() and done.exception() is not None and self.error is None:
            self.error = done.exception()
            self._on_error()

    # ----- a candidate's life -----------------------------------------------------------------------

    def proposed(self, c: Cand, proposal: Proposal, parent: Cand | None) -> asyncio.Future:
        """The candidate's row, queued; the returned future is the first thing its evaluation awaits, so
        nothing runs for a candidate the store does not have. Rows are committed in proposal order (the
        store's lock is FIFO), so a crash never leaves a gap."""
        cid, number, island, generation, cell = c.id, c.number, c.island, c.generation, c.cell
        row = (
            cid,
            self.run_id,
            number,
            island,
            generation,
            parent.id if parent else None,
            proposal.operator,
            proposal.mutator,
            c.source_hash,
            json.dumps(c.descriptor, sort_keys=True),
            cell,
            PENDING,
            time.time(),
        )

        batch = Batch()
        batch.execute(
            "INSERT INTO candidates (id, run_id, number, island, generation, parent_id, operator, mutator, "
            "source_hash, descriptor_json, cell, status, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            row,
        )
        for call_id in proposal.llm_call_ids:
            batch.execute("UPDATE llm_calls SET candidate_id=? WHERE id=?", (cid, call_id))
        batch.event(
            self.run_id,
            CandidateAdded(
                id=cid,
                number=number,
                island=island,
                generation=generation,
                parent=parent.id if parent else None,
                operator=proposal.operator,
                mutator=proposal.mutator,
                status=PENDING,
                cell=cell,
            ),
        )
        return self.store.submit(batch)

    def stage_started(self, c: Cand, job_id: str, stage: str, first: bool) -> None:
        """A stage's job started (`first`: the candidate's first, which makes it running). For viewers: it
        does not hold up its job (job ids are derived, not read back) and rides with the next trip."""
        now = time.time()
        batch = Batch()
        if first:
            batch.execute("UPDATE candidates SET status=? WHERE id=?", (RUNNING, c.id))
        batch.execute(
            "INSERT INTO jobs (id, run_id, candidate_id, stage, state, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET state='running', "
            "attempts=attempts+1, updated_at=excluded.updated_at",
            (job_id, self.run_id, c.id, stage, "running", now, now),
        )
        batch.event(self.run_id, CandidateStatus(id=c.id, status=RUNNING, stage=stage))
        self.write_behind(batch, lazy=True)

    def job_submitted(self, job_id: str, external_id: str, executor: str) -> None:
        """A scheduler's id for one of the candidate's jobs (Slurm)."""
        batch = Batch()
        batch.execute("UPDATE jobs SET external_id=?, executor=? WHERE id=?", (external_id, executor, job_id))
        self.write_behind(batch, lazy=True)

    def environment_fault(self, c: Cand, outcome: EvalOutcome, decision: fault_policy.Decision, paused: bool) -> None:
        """The stage that met a fault not of the candidate's doing, kept for the report; `paused`: the run
        paused itself on it and the candidate waits, pending."""
        batch = Batch()
        for sql, params in result_rows.environment_rows(self.run_id, c.id, outcome, decision, self.store.blobs):
            batch.execute(sql, params)
        batch.event(
            self.run_id,
            Log(
                level="warning",
                message=f"candidate {c.id}: not its fault ({decision.fault.kind}): {decision.reason}"[:500],
            ),
        )
        if paused:
            batch.execute("UPDATE candidates SET status=? WHERE id=?", (PENDING, c.id))
            batch.event(self.run_id, CandidateStatus(id=c.id, status=PENDING, stage="paused"))
        self.write_behind(batch)

    async def back_to_pending(self, c: Cand) -> None:
        """Cancelled mid-evaluation (pause --hard, stop): evaluated again on resume."""
        async with self.store.transaction() as tx:
            await tx.execute("UPDATE candidates SET status=? WHERE id=?", (PENDING, c.id))
            await tx.execute("UPDATE jobs SET state='cancelled' WHERE candidate_id=? AND state='running'", (c.id,))
            await tx.event(self.run_id, CandidateStatus(id=c.id, status=PENDING, stage="cancelled"))

    def result(
        self, c: Cand, outcome: EvalOutcome, admission: Admission, baseline_ms: float | None, elapsed_s: float
    ) -> None:
        """The result (`c` already holds it), its evaluation rows, what its admission changed (archive,
        best) and the seed's baseline: one batch, written behind (the slot is free for the next candidate
        at once; that candidate's row commits in the same trip or a later one)."""
        fitness, reason = c.fitness, c.reason
        interval = interval_of((outcome.metrics or {}).get("speedup_interval"))
        now = time.time()
        tx = Batch()
        tx.execute("UPDATE jobs SET state='done', updated_at=? WHERE candidate_id=? AND state='running'", (now, c.id))
        for rec in outcome.stages:
            log_hash = self.store.blobs.put_text(rec.log) if rec.log else None
            tx.execute(
                "INSERT INTO evaluations (candidate_id, run_id, stage, status, rc, duration_s, node, attempt, "
                "log_hash, result_json, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    c.id,
                    self.run_id,
                    rec.stage,
                    rec.status,
                    rec.rc,
                    rec.duration_s,
                    rec.node,
                    rec.attempt,
                    log_hash,
                    json.dumps(rec.result) if rec.result else None,
                    now,
                ),
            )
        tx.execute(
            "UPDATE candidates SET status=?, correct=?, speedup=?, time_ms=?, baseline_ms=?, fitness=?, "
            "reason=?, metrics_json=?, finished_at=?, review=?, speedup_low=?, speedup_high=? WHERE id=?",
            (
                outcome.status,
                outcome.correct,
                outcome.speedup,
                outcome.time_ms,
                outcome.baseline_ms,
                fitness,
                reason,
                json.dumps({**(outcome.metrics or {}), "feedback": trim(outcome.feedback)}),
                now,
                c.review,
                None if interval is None else interval[0],
                None if interval is None else interval[1],
                c.id,
            ),
        )
        for sql, params in result_rows.verdict_rows(c.id, outcome):
            tx.execute(sql, params)
        tx.event(
            self.run_id,
            Result(
                id=c.id,
                status=outcome.status,
                correct=outcome.correct,
                speedup=outcome.speedup,
                time_ms=outcome.time_ms,
                reason=reason,
                fitness=fitness,
                review=c.review,
                speedup_interval=None if interval is None else list(interval),
            ),
        )
        for sql, params in result_rows.timeline_rows(
            c.id, outcome.timelines, (outcome.metrics or {}).get("timeline") or {}
        ):
            tx.execute(sql, params)  # with the result, in the same transaction
        if baseline_ms is not None:
            tx.execute("UPDATE runs SET baseline_time_ms=? WHERE id=?", (baseline_ms, self.run_id))
        if admission.archived:
            tx.execute(
                "INSERT OR REPLACE INTO archive (run_id, cell, candidate_id, fitness) VALUES (?,?,?,?)",
                (self.run_id, c.cell, c.id, fitness),
            )
            tx.event(self.run_id, ArchiveCell(cell=c.cell, id=c.id, fitness=fitness))
        if admission.best:
            tx.event(self.run_id, Best(**best_fields(c)))
        tx.execute("UPDATE runs SET elapsed_s=?, updated_at=? WHERE id=?", (elapsed_s, now, self.run_id))
        if outcome.status != DONE:
            tx.event(
                self.run_id, Log(level="info", message=f"candidate {c.id} {outcome.status}: {outcome.reason[:200]}")
            )
        for flag in (outcome.metrics or {}).get("flags", []):
            tx.event(
                self.run_id,
                Log(
                    level="warning",
                    message=(
                        f"candidate {c.id} beat the overlap bound on {flag['config']} ({flag['candidate_ms']:.4g} ms < "
                        f"{flag['bound_ms']:.4g} ms, the baseline's compute or communication alone): a faster "
                        "computation or a gamed measurement: it waits in the review queue and does not count until accepted"
                    ),
                ),
            )
        self.write_behind(tx)

    async def remeasured(self, cands: list[Cand], best: Cand | None, archive: dict[str, int]) -> None:
        """The finalists' re-measured numbers (each `c` already holds them), the archive's elites as they now
        stand and the best, in one transaction."""
        async with self.store.transaction() as tx:
            for c in cands:
                interval = interval_of(c.metrics.get("speedup_interval"))
                await tx.execute(
                    "UPDATE candidates SET speedup=?, time_ms=?, fitness=?, metrics_json=?, speedup_low=?, "
                    "speedup_high=?, remeasured=1 WHERE id=?",
                    (
                        c.speedup,
                        c.time_ms,
                        c.fitness,
                        json.dumps(c.metrics),
                        None if interval is None else interval[0],
                        None if interval is None else interval[1],
                        c.id,
                    ),
                )
            for cell, cid in archive.items():
                fitness = next((c.fitness for c in cands if c.id == cid), None)
                if fitness is not None:
                    await tx.execute(
                        "INSERT OR REPLACE INTO archive (run_id, cell, candidate_id, fitness) VALUES (?,?,?,?)",
                        (self.run_id, cell, cid, fitness),
                    )
            if best is not None:
                await tx.event(self.run_id, Best(**best_fields(best)))

    async def elapsed(self, elapsed_s: float) -> None:
        """The run's elapsed time; also sends every write still queued (one FIFO)."""
        async with self.store.transaction() as tx:
            await tx.execute(
                "UPDATE runs SET elapsed_s=?, updated_at=? WHERE id=?", (elapsed_s, time.time(), self.run_id)
            )
