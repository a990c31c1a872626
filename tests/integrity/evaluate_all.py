"""Evaluate a set of candidate sources at once through the real evaluation path on a local executor."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.evaluation.evaluation import EvalOutcome, FrozenObjectCache, evaluate_source
from engine.workload import Workload
from remote.local import LocalExecutor


def evaluate_all(workload: Workload, sources: dict[str, str], work: Path, seed: int) -> dict[str, EvalOutcome]:
    """Each source's outcome by name: all evaluated concurrently on one executor (sharing its frozen
    objects), each within 240 s."""

    async def main() -> dict[str, EvalOutcome]:
        executor = LocalExecutor(work_dir=work)
        frozen = FrozenObjectCache()
        try:

            async def one(name: str) -> tuple[str, EvalOutcome]:
                return name, await asyncio.wait_for(
                    evaluate_source(workload, sources[name], executor, job_prefix=name, seed=seed, frozen=frozen), 240
                )

            return dict(await asyncio.gather(*(one(n) for n in sources)))
        finally:
            await executor.close()

    return asyncio.run(main())
