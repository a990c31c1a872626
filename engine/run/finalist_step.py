"""Before a run ends: its finalists (the top of the ranking and the seed) re-measured side by side in fresh
jobs (engine/evaluation/remeasure.py), their numbers replaced by the re-measured ones, and the best named
again from them. A finalist's search numbers stay in its metrics (`search`), and `remeasured` says which
numbers are re-measured ones (the report and the TUI show it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from remote.jobs import Executor

from ..evaluation.evaluation import FrozenObjectCache, fresh_seed
from ..evaluation.harness_result import HarnessResult
from ..evaluation.remeasure import remeasure
from ..search import ranking
from ..search.finalists import finalists
from ..search.population import Cand, Population
from ..workload import Workload
from .ledger import Ledger

PASSES = 2  # when the re-measured finalists fall below a candidate not yet re-measured, it is re-measured too
CONTENDERS = 3  # the re-measured leaders measured side by side again, their jobs pooled, before one is named


async def remeasure_finalists(
    population: Population,
    seed_id: int | None,
    source_of: Callable[[Cand], str],
    workload: Workload,
    executor: Executor,
    frozen: FrozenObjectCache,
    ledger: Ledger,
    job_prefix: str,
) -> list[Cand]:
    """The candidates re-measured (their numbers now the re-measurement's), the store updated.

    First every finalist (engine/search/finalists.py) in side-by-side jobs; then the leaders among them by
    their re-measured medians again, side by side, their jobs pooled with the first ones: on a busy machine
    a job reads a few % off (where the load fell on it), which three jobs do not average out between
    leaders that differ by about as much."""
    changed: dict[int, Cand] = {}
    jobs: dict[int, tuple[HarnessResult, ...]] = {}

    async def measure(picks: list[Cand], tag: str) -> None:
        ids = [c.id for c in picks]
        results = await remeasure(
            workload,
            executor,
            {c.id: source_of(c) for c in picks},
            job_prefix=f"{job_prefix}-{tag}",
            seed=fresh_seed(),
            frozen=frozen,
            earlier=jobs,
        )
        for r in results:
            c = population.cands[r.candidate_id]
            jobs[c.id] = r.results
            search = c.metrics.get("search") or {
                "speedup": c.speedup,
                "speedup_interval": c.metrics.get("speedup_interval"),
            }
            beside = sorted(
                {*((c.metrics.get("remeasured") or {}).get("beside") or []), *(i for i in ids if i != c.id)}
            )
            c.metrics = {
                **c.metrics,
                "benchmark": r.benchmark,
                "speedup_interval": None if r.interval is None else [round(x, 4) for x in r.interval],
                "measurements": [*(c.metrics.get("measurements") or []), r.speedup],
                "search": search,
                "remeasured": {"jobs": r.jobs, "beside": beside},
            }
            c.speedup, c.time_ms = r.speedup, r.time_ms
            c.fitness = ranking.remeasured_fitness(r.speedup)
            population.withdraw(c)  # out and in again: its cell and the best are decided anew
            population.admit(c)
            changed[c.id] = c

    for n in range(PASSES):
        picks = [c for c in finalists(population, seed_id) if not c.metrics.get("remeasured")]
        if not picks or (n and population.best is not None and population.best.metrics.get("remeasured")):
            break
        await measure(picks, f"p{n}")
    leaders = sorted(
        (c for c in population.eligible.values() if c.id in jobs and c.id != seed_id),
        key=lambda c: (-(c.fitness or 0.0), c.id),
    )[:CONTENDERS]
    if len(leaders) > 1:
        await measure(leaders, "lead")
    if changed:
        archive = {cell: e.candidate_id for cell, e in population.archive.cells.items()}
        await ledger.remeasured(list(changed.values()), population.best, archive)
    return list(changed.values())


async def before_the_end(
    population: Population,
    source_of: Callable[[Cand], str],
    workload: Workload,
    executor: Executor,
    frozen: FrozenObjectCache,
    ledger: Ledger,
    run_id: str,
    log: Callable[[str, str], Awaitable[None]],
) -> None:
    """The finalists and the seed, side by side in fresh jobs; the run's log says which were (or why not)."""
    seed = min((c for c in population.cands.values() if c.operator == "seed"), key=lambda c: c.id, default=None)
    try:
        changed = await remeasure_finalists(
            population,
            None if seed is None else seed.id,
            source_of,
            workload,
            executor,
            frozen,
            ledger,
            f"{run_id}-final",
        )
    except (OSError, RuntimeError, ValueError) as exc:  # the search's numbers stand
        await log("warning", f"the finalists could not be re-measured: {exc}")
        return
    if changed:
        ids = ", ".join(f"#{c.id}" for c in changed)
        await log("info", f"re-measured side by side before the end: {ids}")
