"""Migration between islands: every `migration_interval` evaluations, each island sends its best eligible members
that the next island on the ring lacks (`migration_size` of them), logged and announced in one transaction."""

from __future__ import annotations

import time

from ..contract import Migration
from ..search.islands import IslandModel
from ..search.population import Cand
from ..store.store import Store


class Migrations:
    def __init__(self, store: Store, run_id: str, islands: IslandModel, interval: int, size: int):
        self.store, self.run_id, self.islands, self.interval, self.size = store, run_id, islands, interval, size
        self.last_at = 0  # the evaluation count at the last migration

    async def maybe(self, cands: dict[int, Cand], evaluated: int) -> None:
        """Migrate when `interval` evaluations passed since the last time (with two islands or more)."""
        if len(self.islands) < 2 or evaluated - self.last_at < self.interval:
            return
        self.last_at = evaluated
        await migrate(self.store, self.run_id, self.islands, cands, self.size, evaluated)


async def migrate(
    store: Store, run_id: str, islands: IslandModel, cands: dict[int, Cand], size: int, evaluated: int
) -> None:
    now = time.time()
    async with store.transaction() as tx:
        for src, dst in islands.edges():
            members = [cands[m] for m in islands.islands[src].members if m in cands]
            elites = sorted((c for c in members if c.eligible), key=lambda c: -(c.fitness or 0))
            dst_members = set(islands.islands[dst].members)
            moved = [c for c in elites if c.id not in dst_members][:size]
            for c in moved:
                islands.add(dst, c.id)
                islands.islands[dst].last_migration = evaluated
                await tx.insert(
                    "INSERT INTO migrations_log (run_id, src_island, dst_island, candidate_id, at_evaluation, at) "
                    "VALUES (?,?,?,?,?,?)",
                    (run_id, src, dst, c.id, evaluated, now),
                )
                await tx.event(run_id, Migration(src=src, dst=dst, id=c.id))
