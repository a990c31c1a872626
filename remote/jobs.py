"""Job descriptions and results shared by every executor (local, SSH).

A job is one command run in a fresh job directory that holds the input files it names. It knows nothing
about evolution: the engine turns a build or benchmark stage into a `JobSpec`, an executor runs it and
returns a `JobResult` with the files the job was asked to bring back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable


class JobStatus(str, Enum):
    OK = "ok"  # the command ran and exited (rc may still be non-zero)
    TIMEOUT = "timeout"  # killed at its timeout, with its whole process group
    CANCELLED = "cancelled"  # cancelled by the engine (pause --hard, stop, shutdown)
    LOST = "lost"  # the node went away; the engine may retry elsewhere
    ERROR = "error"  # the executor could not start it (bad spec, upload failed, ...)


def content_hash(data: bytes) -> str:
    """Content address used for uploads and the store's blobs."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class JobSpec:
    """One command to run.

    `argv` runs with the job directory as its working directory. `files` are written there first
    (relative path -> content; an executor may skip files the node already has by content hash).
    `outputs` are relative paths brought back after the command ends (missing ones are simply absent).
    `gpus` > 0 asks for that many GPUs leased together on one node; the executor sets
    CUDA_VISIBLE_DEVICES. `env` is added to the node's environment: never put secrets in it.
    A job with gpus == 0 holds `cpus` CPU slots (a CPU benchmark takes one per rank so nothing else
    shares its cores); a GPU job holds its GPUs and no CPU slot, so compiles run beside benchmarks.
    `kind` is "build" or "run" (informational: for logs and the nodes pane).
    """

    job_id: str
    argv: Sequence[str]
    files: Mapping[str, bytes] = field(default_factory=dict)
    outputs: Sequence[str] = ()
    timeout_s: float = 60.0
    gpus: int = 0
    cpus: int = 1  # CPU slots held (CPU benchmarks hold all their ranks' cores)
    env: Mapping[str, str] = field(default_factory=dict)
    kind: str = "run"
    executable: Sequence[str] = ()  # files (relative paths) to chmod +x after writing

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError(f"job {self.job_id}: empty argv")
        if not self.timeout_s > 0 or self.timeout_s == float("inf"):  # NaN fails `> 0` too
            raise ValueError(f"job {self.job_id}: timeout_s must be a positive finite number")
        for rel in list(self.files) + list(self.outputs):
            if rel.startswith("/") or ".." in rel.split("/"):
                raise ValueError(f"job {self.job_id}: path {rel!r} must stay inside the job directory")


@dataclass
class JobResult:
    job_id: str
    status: JobStatus
    rc: int | None = None
    log: str = ""  # the tail of stdout+stderr (bounded)
    outputs: dict[str, bytes] = field(default_factory=dict)
    node: str = "local"
    gpus: tuple[int, ...] = ()
    duration_s: float = 0.0
    error: str = ""
    attempts: int = 1
    interference: dict[str, Any] | None = None  # the node's load and steal around the job (remote/interference.py)

    @property
    def ok(self) -> bool:
        return self.status is JobStatus.OK and self.rc == 0


@dataclass
class NodeState:
    """What the engine (and the TUI's nodes pane) can see about a node."""

    name: str
    healthy: bool = True
    quarantined: bool = False
    gpus_total: int = 0
    gpus_busy: int = 0
    cpu_slots: int = 0
    cpu_busy: int = 0
    running_jobs: int = 0
    failures: int = 0
    detail: str = ""
    # A scheduler's queue (Slurm): its reason -> jobs pending for it, and job id -> "STATE" or "STATE: reason".
    pending: dict[str, int] = field(default_factory=dict)
    queue: dict[str, str] = field(default_factory=dict)


class NoUsableNode(Exception):
    """No node of an executor can run the jobs asked of it (all refused, or none has the GPUs a job needs)."""


# Told (job id, the scheduler's id for it, the executor's name) when a scheduler accepts a job.
SubmittedHook = Callable[[str, str, str], None]


@runtime_checkable
class Executor(Protocol):
    """What the engine needs from a place that runs jobs. An executor subclasses it: the optional
    features (`reconcile`, `watch_submissions`) have defaults here that do nothing, and an executor that
    has the feature overrides them, so the engine calls them on every executor without probing."""

    async def start(self) -> None: ...

    async def run(self, spec: JobSpec) -> JobResult:
        """Run a job to completion (or timeout/cancel). Cancelling the awaiting task kills the job's
        whole process group before the CancelledError propagates."""
        ...

    async def close(self) -> None:
        """Kill whatever is still running and release connections."""
        ...

    def nodes(self) -> list[NodeState]: ...

    @property
    def max_gpus_per_job(self) -> int:
        """The most GPUs one job can lease (0 when there are no GPUs)."""
        ...

    async def reconcile(self, keep: set[str], mine: str) -> list[str]:
        """After an engine died: kill what it left running, except the jobs named in `keep` (a restarted
        engine may adopt them); returns the ids killed. Only jobs whose id `mine` matches (a whole-id
        pattern, valid as POSIX ERE and Python `re`) are touched: the jobs of every other run sharing the
        work directory are another engine's, live or not, and stay. Default: an executor that leaves
        nothing behind."""
        return []

    def watch_submissions(self, hook: SubmittedHook | None) -> None:
        """Have `hook` told each job's id in a scheduler (Slurm), when it is submitted or adopted; the
        engine stores it (jobs.external_id). Default: an executor without a scheduler has no such id."""
        return None


LOG_TAIL_BYTES = 64 * 1024


def tail_text(data: bytes, limit: int = LOG_TAIL_BYTES) -> str:
    if len(data) > limit:
        data = b"...[truncated]...\n" + data[-limit:]
    return data.decode("utf-8", errors="replace")
