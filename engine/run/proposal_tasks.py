"""Proposals in flight: each runs as its own task, so the engine's loop never waits on a model to check its
stop, pause and stop conditions, and proposals overlap evaluations.

A stop first ends the requests the proposals wait on (`stop_calls`: the LLM service records each as
cancelled, with the tokens its prompt spent, and the proposal ends with nothing), then waits for the
proposals to finish their own writes; only one that still has not ended is cancelled. Cancelling a proposal
in the middle of a store transaction would roll back whatever that transaction had flushed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..llm.budget import BudgetExhausted
from ..search.population import Cand
from .proposer import NotReady

CANCEL_WAIT_S = 30.0  # a cancelled proposal's last store write (its call's row) gets this long
MAX_EMPTY_PROPOSALS = 40  # consecutive proposals that were duplicates or invalid before giving up


@dataclass(frozen=True)
class Intake:
    """What the finished proposals came to."""

    stop_reason: str | None  # a reason to stop that one of them gave
    empty: int  # empty proposals (duplicates, invalid) in a row
    blocked: bool  # no proposal is worth starting until an evaluation ends


class ProposalTasks:
    def __init__(self, on_done: Callable[[], None], stop_calls: Callable[[], None]):
        self._tasks: list[asyncio.Task] = []
        self._on_done = on_done
        self._stop_calls = stop_calls

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, proposal: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.create_task(proposal, name="proposal")
        task.add_done_callback(lambda _t: self._on_done())
        self._tasks.append(task)
        return task

    def finished(self) -> list[asyncio.Task]:
        """The tasks that ended, in the order they were started (each handed out once)."""
        done = [t for t in self._tasks if t.done()]
        self._tasks = [t for t in self._tasks if not t.done()]
        return [t for t in done if not t.cancelled()]

    def take(
        self, empty: int, offer: Callable[[Cand], None], idle: Callable[[], bool], no_parent: Callable[[], str]
    ) -> Intake:
        """Fold in the proposals that finished, in order: each child is offered (to start, or to wait, pending);
        `empty` counts on from the last intake. `idle`: nothing is evaluated or proposed, so a proposal
        that found no parent will not find one later either (`no_parent` says why)."""
        blocked = False
        for done in self.finished():
            try:
                cand = done.result()
            except BudgetExhausted as exc:
                return Intake(f"LLM budget spent ({exc})" if str(exc) else "LLM budget spent", empty, True)
            except NotReady:
                if idle():
                    return Intake(no_parent(), empty, True)
                blocked = True
                continue
            if cand is None:
                empty += 1
                if empty >= MAX_EMPTY_PROPOSALS:
                    return Intake("no new candidate could be proposed (design space exhausted)", empty, True)
                continue
            empty = 0
            offer(cand)
        return Intake(None, empty, blocked)

    async def cancel(self) -> None:
        """End every proposal in flight: their requests cut short, then a bounded wait for them to end."""
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        self._stop_calls()
        _, late = await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)
        for t in late:
            t.cancel()
        if late:
            await asyncio.wait(late, timeout=CANCEL_WAIT_S)
        for t in tasks:  # retrieve their outcomes: a proposal ended by a stop is not an error of the run
            if t.done() and not t.cancelled():
                t.exception()
