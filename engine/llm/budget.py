"""A run's USD budget on *committed* cost: what was spent (from the store) plus what calls in flight may
still cost (estimated from their prompt and max_tokens). A call that would push the committed cost past
the budget is not made: `BudgetExhausted`, and the engine stops the run with reason "budget"."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store.store import Store


class BudgetExhausted(Exception):
    """Raised by `propose` when the run's LLM budget (spent + in flight) is committed: stop with reason "budget"."""


@dataclass
class Budget:
    limit_usd: float | None
    spent_usd: float = 0.0
    in_flight: dict[int, float] = field(default_factory=dict)
    run_id: str | None = None
    _ids: itertools.count = field(default_factory=itertools.count)

    @property
    def committed_usd(self) -> float:
        return self.spent_usd + sum(self.in_flight.values())

    async def load(self, store: Store | None, run_id: str | None) -> None:
        """Take the spent amount from the store (a resumed run counts what it already spent). Once per run."""
        if run_id == self.run_id and self.run_id is not None:
            return
        self.run_id = run_id
        self.spent_usd = 0.0
        if store is not None and run_id is not None:
            row = await store.fetchone(
                "SELECT COALESCE(SUM(cost_usd), 0) AS spent FROM llm_calls WHERE run_id=?", (run_id,)
            )
            self.spent_usd = float(row["spent"]) if row else 0.0

    def exhausted(self) -> bool:
        return self.limit_usd is not None and self.committed_usd >= self.limit_usd

    def reserve(self, estimate_usd: float) -> int:
        """Hold `estimate_usd` for a call about to start; BudgetExhausted if it does not fit."""
        if self.limit_usd is not None and self.committed_usd + estimate_usd > self.limit_usd:
            raise BudgetExhausted(
                f"LLM budget of {self.limit_usd:.4f} USD is committed: spent {self.spent_usd:.4f}, "
                f"in flight {self.committed_usd - self.spent_usd:.4f}, next call up to {estimate_usd:.4f}"
            )
        token = next(self._ids)
        self.in_flight[token] = estimate_usd
        return token

    def settle(self, token: int, cost_usd: float) -> None:
        """The call ended: its real cost replaces its estimate."""
        self.in_flight.pop(token, None)
        self.spent_usd += cost_usd
