"""CPU and GPU slot leases on one node.

A multi-GPU job takes all its GPUs at once or waits: never a partial lease (two half-leased jobs would
deadlock), never two jobs on one GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class SlotTable:
    def __init__(self, cpu_slots: int, gpu_ids: list[int]):
        if cpu_slots < 1:
            raise ValueError("cpu_slots must be >= 1")
        self.cpu_slots = cpu_slots
        self.gpu_ids = list(gpu_ids)
        self._cpu_busy = 0
        self._gpu_free = set(self.gpu_ids)
        self._cond = asyncio.Condition()

    @property
    def cpu_busy(self) -> int:
        return self._cpu_busy

    @property
    def gpus_busy(self) -> int:
        return len(self.gpu_ids) - len(self._gpu_free)

    def can_ever_fit(self, gpus: int) -> bool:
        return gpus <= len(self.gpu_ids)

    @contextlib.asynccontextmanager
    async def lease(self, gpus: int = 0, cpus: int = 1) -> AsyncIterator[tuple[int, ...]]:
        """Hold `cpus` CPU slots (gpus == 0; capped at the node's slots) or `gpus` GPUs (a GPU job uses
        no CPU slot: compiles keep running while benchmarks hold the GPUs)."""
        if not self.can_ever_fit(gpus):
            raise ValueError(f"job needs {gpus} GPUs but the node has {len(self.gpu_ids)}")
        want_cpus = 0 if gpus else max(1, min(cpus, self.cpu_slots))
        async with self._cond:
            if gpus == 0:
                await self._cond.wait_for(lambda: self._cpu_busy + want_cpus <= self.cpu_slots)
                self._cpu_busy += want_cpus
                taken: tuple[int, ...] = ()
            else:
                await self._cond.wait_for(lambda: len(self._gpu_free) >= gpus)
                taken = tuple(sorted(self._gpu_free)[:gpus])
                self._gpu_free.difference_update(taken)
        try:
            yield taken
        finally:
            # Release even when the holder is being cancelled: shield the bookkeeping.
            await asyncio.shield(self._release(taken, want_cpus))

    async def _release(self, taken: tuple[int, ...], cpus: int) -> None:
        async with self._cond:
            self._gpu_free.update(taken)
            self._cpu_busy -= cpus
            self._cond.notify_all()
