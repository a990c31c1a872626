"""Which executor runs a verb's jobs: the SSH executor of a cluster.yaml, else local subprocesses.

One rule for every verb that evaluates candidates (`cuco run`, `cuco transform`): the executor comes back
started, and a start that fails or hangs leaves nothing open behind it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

from remote.jobs import Executor, NoUsableNode
from remote.local import LocalExecutor

START_TIMEOUT_S = 120.0  # the SSH executor connects to every node in parallel, each under its own timeout
CLOSE_TIMEOUT_S = 60.0

log = logging.getLogger(__name__)


async def open_executor(
    home: Path, cluster: str | Path | None, *, gpus_per_job: int = 0, workload_name: str = "the workload"
) -> Executor:
    """A started executor. `cluster`: a cluster.yaml (jobs run on its nodes over SSH); None: this machine,
    with job directories under `home/jobs`. Raises InputError for a bad cluster.yaml and
    remote.jobs.NoUsableNode when no node can be used, or none has the `gpus_per_job` GPUs the workload's
    benchmark jobs lease (checked before anything is built: those jobs would fail one by one)."""
    if cluster:
        from remote.registry import executor_from_file  # asyncssh only when a cluster is asked for

        executor = executor_from_file(Path(cluster), Path(home))
    else:
        # CUCO_PYTHON: the interpreter whose site-packages hold the NCCL wheel the builds link against.
        executor = LocalExecutor(work_dir=Path(home) / "jobs", extra_env={"CUCO_PYTHON": sys.executable})
    try:
        await asyncio.wait_for(executor.start(), START_TIMEOUT_S)
        require_gpus(executor, gpus_per_job, workload_name, cluster)
    except BaseException:
        await close_executor(executor)  # connections a partial start opened
        raise
    return executor


def require_gpus(executor: Executor, gpus: int, workload_name: str, cluster: str | Path | None) -> None:
    """Raise NoUsableNode, saying what to do, when no node of `executor` has `gpus` GPUs."""
    have = executor.max_gpus_per_job
    if gpus <= have:
        return
    if cluster:
        where = f"the most any usable node of {cluster} has is {have} (`cuco nodes check {cluster}` lists each node's)"
    elif have == 0:
        where = "this machine has none (the local executor found no NVIDIA GPU: nvidia-smi is missing or lists none)"
    else:
        where = f"this machine has {have}"
    raise NoUsableNode(
        f"{workload_name} needs {gpus} GPUs for each of its benchmark jobs, but {where}. Run it on a machine "
        f"with {gpus} GPUs, or with --cluster FILE naming nodes that have them, or with fewer ranks (--ranks N) "
        f"where the workload has configs for N"
    )


async def close_executor(executor: Executor) -> None:
    """Close, bounded: a node that stopped answering must not keep the verb from exiting."""
    try:
        await asyncio.wait_for(executor.close(), CLOSE_TIMEOUT_S)
    except TimeoutError:
        log.warning("closing the executor took more than %.0f s; left behind", CLOSE_TIMEOUT_S)
