"""Proposals in flight: each runs as its own task, so the engine's loop never waits on a model to check its
stop, pause and stop conditions, and proposals overlap evaluations.

A stop cancels the tasks still in flight; the LLM service records a cancelled call with the tokens it had
sent (engine/llm/service.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

CANCEL_WAIT_S = 30.0  # a cancelled proposal's last store write (its call's row) gets this long


class ProposalTasks:
    def __init__(self, on_done: Callable[[], None]):
        self._tasks: list[asyncio.Task] = []
        self._on_done = on_done

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

    async def cancel(self) -> None:
        """Cancel every proposal in flight and wait (bounded) until each has recorded what it spent."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)
            for t in tasks:  # retrieve their outcomes: a cancelled proposal's end is not an error of the run
                if t.done() and not t.cancelled():
                    t.exception()
