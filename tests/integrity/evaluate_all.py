"""Evaluate a set of candidate sources at once through the real evaluation path on a local executor."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path

from engine import blocks
from engine.evaluation.evaluation import EvalOutcome, FrozenObjectCache, evaluate_source
from engine.workload import Workload, load_workload
from remote.local import LocalExecutor

# where a cheat's own lines go in the demo's seed: its declarations before cuco_run, its first lines inside
RUN_HEAD = 'extern "C" int cuco_run(const cuco_problem* p) {\n'


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


def demo_cheats(
    tmp: Path, cheats: dict[str, tuple[str, str]], allowed: list[str], iters: int
) -> tuple[Workload, dict[str, str]]:
    """A copy of the demo workload whose symbol policy also allows `allowed` (so that what a cheat is
    caught by is the harness, not the policy), and each cheat's source: the seed with the cheat's
    (declarations, first lines of cuco_run) spliced in, checked by the block rules."""
    base = load_workload("demo")
    folder = tmp / "workloads" / "demo"
    shutil.copytree(base.root, folder)
    shutil.copytree(base.root.parent / "_harness", tmp / "workloads" / "_harness")
    with open(folder / "workload.yaml", "a") as f:
        f.write(f"\npolicy:\n  allow: [{', '.join(allowed)}]\n")
    workload = dataclasses.replace(load_workload(str(folder)), warmup=1, iters=iters)
    seed = workload.seed_source
    sources = {}
    for name, (decls, head) in cheats.items():
        sources[name] = seed.replace(RUN_HEAD, decls + RUN_HEAD + head)
        blocks.validate_child(seed, sources[name])
    return workload, sources
