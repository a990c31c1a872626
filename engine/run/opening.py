"""What a run needs before its loop starts: the workload at the run's rank count, an executor (this machine's,
or a cluster's), its mutator, and, on a restart, the jobs a dead engine left running reconciled. A run that
cannot start leaves nothing open behind it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

from remote.jobs import Executor

from .. import stages
from ..config import RunConfig
from ..evaluation.executors import open_executor  # the one rule shared with `cuco transform`
from ..search.mutators.base import Mutator
from ..search.population import Cand
from ..store.schema import PENDING, RUNNING
from ..store.store import Store
from ..workload import Workload

CLOSE_WAIT_S = 60.0
RECONCILE_WAIT_S = 120.0


def sized(workload: Workload, config: RunConfig) -> Workload:
    """The workload as this run's jobs see it (--ranks N picks the configs and GPUs of N ranks)."""
    if config.ranks is not None and config.ranks != workload.ranks:
        return workload.with_ranks(config.ranks)
    return workload


async def default_executor(home: Path, config: RunConfig, workload: Workload) -> Executor:
    return await open_executor(
        Path(home), config.cluster, gpus_per_job=workload.launch_gpus, workload_name=workload.name
    )


def llm_mutator(config: RunConfig, workload: Workload, home: Path) -> Mutator | None:
    """The LLM mutator the config asks for, or None (the design-space mutator stays)."""
    if config.mutator != "llm" and not config.llm:
        return None
    # the LLM SDKs (optional: GPU nodes and minimal installs lack them) load only when a model is used
    from ..search.mutators.llm import build_llm_mutator, settings_from_config

    return build_llm_mutator(
        config.llm,
        config.budget_usd,
        workload,
        home=Path(home),
        embedding=config.embedding,
        settings=settings_from_config(config),
    )


@contextlib.asynccontextmanager
async def closed_on_failure(store: Store, executor: Callable[[], Executor | None], owned: bool) -> AsyncIterator[None]:
    """Close the store (and the executor, when the run opened it: `executor()` is the one opened by then) if
    what follows fails."""
    try:
        yield
    except BaseException:
        await store.close()
        opened = executor()
        if owned and opened is not None:
            await asyncio.wait_for(opened.close(), CLOSE_WAIT_S)
        raise


async def reconcile(executor: Executor, cands: Iterable[Cand], run_id: str) -> None:
    """Kill what a dead engine left running, except the jobs of candidates that are still to be evaluated."""
    keep = {job for c in cands if c.status in (PENDING, RUNNING) for job in stages.job_ids(f"{run_id}-c{c.id}")}
    await asyncio.wait_for(executor.reconcile(keep, stages.run_jobs_pattern(run_id)), RECONCILE_WAIT_S)
