"""The candidates being evaluated: one task each (never two for one candidate: a second would count it twice),
each running the evaluation cascade (engine/evaluation/evaluation.py) with the fault policy's retries. A retry
after an environment fault gets fresh job ids; the benchmark's seed is drawn fresh, never from anything a
candidate knows."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from remote.jobs import Executor

from ..evaluation import fault_policy
from ..evaluation.evaluation import EvalOutcome, FrozenObjectCache, StageRecord, evaluate_source, fresh_seed
from ..search.population import Cand
from ..store.schema import RUNNING
from ..workload import Workload
from .ledger import Ledger

CANCEL_WAIT_S = 30.0  # cancelled evaluations get this long to put their candidates back to pending


class Evaluations:
    def __init__(
        self,
        run_id: str,
        workload: Workload,
        executor: Executor,
        ledger: Ledger,
        would_be_best: Callable[[float], bool],
        on_end: Callable[[], None],
    ):
        self.run_id, self.workload, self.executor, self.ledger = run_id, workload, executor, ledger
        self.would_be_best, self.on_end = would_be_best, on_end
        self.tasks: dict[int, asyncio.Task] = {}
        self.faults = fault_policy.FaultPolicy()
        self.frozen = FrozenObjectCache()  # the harness's objects, built once per run

    def __len__(self) -> int:
        return len(self.tasks)

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self.tasks

    def start(self, candidate_id: int, evaluation: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Start the candidate's evaluation unless it is in flight already; whether it started."""
        if candidate_id in self.tasks:
            return False
        task = asyncio.create_task(evaluation(), name=f"eval-{candidate_id}")
        self.tasks[candidate_id] = task
        task.add_done_callback(functools.partial(self._ended, candidate_id))
        return True

    def _ended(self, candidate_id: int, _task: asyncio.Task) -> None:
        self.tasks.pop(candidate_id, None)
        self.on_end()

    async def cancel(self) -> None:
        tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)

    async def outcome(self, c: Cand, source: str, on_fault: fault_policy.OnFault) -> EvalOutcome | None:
        """The candidate's verdict, or None when the run paused itself on the environment (it waits)."""
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
                confirm_if=self.would_be_best,
                frozen=self.frozen,
            )

        return await fault_policy.evaluate_with_retries(self.faults, c.id, attempt, on_fault)
