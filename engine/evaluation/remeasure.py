"""Finalists re-measured side by side: each built once, then benchmarked in fresh jobs taken in turns
(A B C A B C ...), so every one of them meets the same stretch of the machine's load. Their numbers are then
those of these jobs alone (rounds pooled: pooled.py), not of the search's measurement, which was chosen for
being high and so reads high (the winner's curse).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from remote.jobs import Executor

from ..stages import BENCHMARK
from ..workload import Workload
from .evaluation import FrozenObjectCache, build_stage, mode_configs, read_result, run_job
from .harness_result import HarnessResult, ResultError
from .pooled import pooled

TURNS = 3  # benchmark jobs per finalist: a job-to-job spread of a few % needs more than two to average out


@dataclass(frozen=True)
class Remeasured:
    candidate_id: int
    speedup: float | None
    interval: tuple[float, float] | None
    time_ms: float | None
    benchmark: dict[str, Any]  # the pooled result (its configs carry every job's rounds)
    jobs: int
    results: tuple[HarnessResult, ...]  # every job's own result, to pool with more jobs later


async def remeasure(
    workload: Workload,
    executor: Executor,
    sources: dict[int, str],
    *,
    job_prefix: str,
    seed: int,
    frozen: FrozenObjectCache | None = None,
    turns: int = TURNS,
    earlier: dict[int, tuple[HarnessResult, ...]] | None = None,
) -> list[Remeasured]:
    """Each candidate of `sources` (id -> source) benchmarked `turns` times, the candidates in turns, its
    jobs pooled with its `earlier` side-by-side jobs; one whose build or every job fails is left out (its
    earlier numbers stand)."""
    binaries: dict[int, bytes] = {}
    for cid, source in sources.items():
        built = await build_stage(workload, source, executor, job_prefix=f"{job_prefix}-c{cid}", frozen=frozen)
        if built.binary is not None:
            binaries[cid] = built.binary
    results: dict[int, list[HarnessResult]] = {cid: [] for cid in binaries}
    fresh = set()
    expected = [c.name for c in mode_configs(workload, BENCHMARK)]
    for turn in range(turns):
        for cid, binary in binaries.items():
            nonce = secrets.token_hex(16) if workload.harness_nonce else None
            job_id = f"{job_prefix}-c{cid}-t{turn}"
            job = await executor.run(run_job(workload, binary, BENCHMARK, seed + turn, job_id, nonce, timeline=False))
            try:
                result = read_result(job, BENCHMARK, expected, nonce)
            except ResultError:
                continue
            if result.correct:
                results[cid].append(result)
                fresh.add(cid)
    out = []
    for cid, got in results.items():
        if cid in fresh:
            every = [*(earlier or {}).get(cid, ()), *got]
            p = pooled(every)
            out.append(Remeasured(cid, p.speedup, p.speedup_interval, p.time_ms, p.raw, len(every), tuple(every)))
    return out
