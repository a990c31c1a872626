"""A mutator's optional hooks, which an LLM mutator has and the design-space mutator lacks: its requests in flight
cut short (a stop never waits on a model), the last children's credit settled once their rows are written, and
its clients closed."""

from __future__ import annotations

import asyncio

from ..evaluation import fault_policy
from ..search.mutators.base import Mutator
from ..store.store import Store

SETTLE_WAIT_S = 60.0
CLOSE_WAIT_S = 30.0


def cancel_calls(mutator: Mutator) -> None:
    stop = getattr(mutator, "cancel_calls", None)
    if stop is not None:
        stop()


async def settle(mutator: Mutator, store: Store, run_id: str) -> None:
    settle = getattr(mutator, "settle", None)
    if settle is not None:
        await fault_policy.quietly(asyncio.wait_for(settle(store, run_id), SETTLE_WAIT_S))


async def close(mutator: Mutator) -> None:
    closer = getattr(mutator, "close", None)
    if closer is not None:
        await asyncio.wait_for(closer(), CLOSE_WAIT_S)
