"""Whose fault a stage's failure was: the candidate's or the environment's. The one place that decides.

The candidate's: a compile error, wrong output, a crash, a timeout of its own run, a refusal by the
harness rules. Those mark it failed (or incorrect, or refused), and the search learns from them.

The environment's: no space left, the host out of memory, a node or connection lost, the scheduler
ending the job, a killed or missing toolchain, a GPU in a bad state, a store that cannot be written.
None of those says anything about the candidate's design point, so it is never marked failed for them:
its stage is retried (`fault_policy`) and the run pauses itself when the fault persists.

Only what the executor and the judge saw decides: the job's status as the executor observed it (lost,
never started, killed from outside), exit codes only the job's own shell or the harness can produce (the
job's shell found no space to write in its directory; the build's NCCL lookup failed; the compiler is
missing), and a failure the harness reports in its own result (carrying the job's nonce) from before any
candidate code ran. Never text in a job's log: the candidate writes part of it (its compile errors, what
it prints), and one that printed "No space left on device" and crashed would pause the run.
`fault_policy` bounds what is left (a candidate that gets its job killed from outside): an environment
fault that only one candidate keeps meeting while others evaluate cleanly is its own.
"""

from __future__ import annotations

import asyncio
import errno
import re
import sqlite3
from dataclasses import dataclass

from remote.jobs import JobResult, JobStatus, NoUsableNode
from remote.sandbox import NO_SANDBOX_EXIT

from ..stages import BUILD

CANDIDATE = "candidate"
ENVIRONMENT = "environment"

# kinds of environment fault (what the report and the TUI group them by)
NO_SPACE = "no space"
HOST_OOM = "host out of memory"
NODE_LOST = "node lost"
NO_NODE = "no usable node"
SCHEDULER = "ended by the scheduler"
TOOLCHAIN = "toolchain"
GPU = "GPU"
STORE = "store"
EXECUTOR = "executor"
NO_SANDBOX = "no sandbox"

# Kinds for which retrying at once is pointless: the run pauses itself after a short backoff instead of
# working through every pending candidate (each would meet the same full disk or dead cluster).
PERSISTENT = frozenset({NO_SPACE, STORE, NO_NODE, NO_SANDBOX})

NOT_OURS_EXIT = 97  # evaluation.NCCL_PRELUDE: the node has no NCCL for the build
NO_SPACE_EXIT = 98  # evaluation.SPACE_PROBE: the job's shell could not write 64 KiB in the job's directory
SHELL_NOT_FOUND = 127  # sh: the compiler (or another tool) is not installed there
KILLED = {-9, 128 + 9}  # SIGKILL, seen directly or through `sh -c` (OOM killer, an operator)

# The executor's own error text (it could not create or start the job): no candidate code has run.
_EXECUTOR_NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded|database or disk is full", re.I)
# A Slurm job that the scheduler (not the job) ended, as the Slurm executor names its state.
_SLURM_ENDED = re.compile(
    r"\b(PREEMPTED|NODE_FAIL|BOOT_FAIL|DEADLINE|REVOKED|CANCELLED|SPECIAL_EXIT|REQUEUED)\b|"
    r"vanished from squeue"
)
# SQLite's own words for a disk or a file it cannot use (not a bug in a statement)
_STORE_TROUBLE = re.compile(
    r"disk is full|readonly|disk I/O error|database is locked|unable to open|"
    r"no such device",
    re.I,
)


@dataclass(frozen=True)
class Fault:
    owner: str  # CANDIDATE | ENVIRONMENT
    kind: str  # for an environment fault, one of the kinds above; for a candidate's, the stage's status
    reason: str  # one line, for the log, the TUI and the report

    @property
    def environment(self) -> bool:
        return self.owner == ENVIRONMENT

    @property
    def persistent(self) -> bool:
        return self.environment and self.kind in PERSISTENT


def candidate(kind: str, reason: str) -> Fault:
    return Fault(CANDIDATE, kind, reason)


def environment(kind: str, reason: str) -> Fault:
    return Fault(ENVIRONMENT, kind, reason)


def _first_match(pattern: re.Pattern, text: str) -> str:
    for line in text.splitlines():
        if pattern.search(line):
            return line.strip()[:200]
    return ""


def of_job(stage: str, job: JobResult) -> Fault | None:
    """The fault of a stage's job, or None when it ran and exited 0. Only what the executor itself observed
    (status, exit code) is taken as the environment's; what the job printed only words a reason."""
    if job.status is JobStatus.LOST:
        where = f" on {job.node}" if job.node else ""
        if _SLURM_ENDED.search(job.error or ""):
            return environment(SCHEDULER, f"{stage}: the scheduler ended the job{where} ({job.error})")
        if "no usable node" in (job.error or ""):
            return environment(NO_NODE, f"{stage}: no node left to run it ({job.error})")
        return environment(
            NODE_LOST, f"{stage}: the node or its connection was lost{where}" + (f" ({job.error})" if job.error else "")
        )
    if job.status is JobStatus.ERROR:
        text = job.error or "the executor could not start it"
        kind = NO_SPACE if _EXECUTOR_NO_SPACE.search(text) else HOST_OOM if "OUT_OF_MEMORY" in text else EXECUTOR
        return environment(kind, f"{stage}: {text}")
    if job.status is JobStatus.CANCELLED:
        return environment(EXECUTOR, f"{stage}: cancelled by the engine")
    if job.status is JobStatus.TIMEOUT:
        return candidate("timeout", f"{stage} timed out ({job.error or 'killed at its timeout'})")
    if job.rc == 0:
        return None
    log = job.log or ""
    if job.rc == NO_SANDBOX_EXIT:
        return environment(
            NO_SANDBOX,
            f"{stage}: {job.node or 'the node'} has no working bwrap and names no weaker sandbox: nothing ran "
            "(install bubblewrap, or export CUCO_SANDBOX=unshare in the node's setup lines)",
        )
    if job.rc == NO_SPACE_EXIT:
        return environment(
            NO_SPACE,
            f"{stage}: no space left on {job.node or 'the node'}: after the job failed, its shell could not write "
            "64 KiB in the job's directory",
        )
    if stage == BUILD and not log.strip():
        # A compiler that fails says why; one that said nothing could not write its log (a full disk).
        return environment(
            NO_SPACE,
            f"build: exit code {job.rc} and no output at all on {job.node or 'the node'}: "
            "the job could not write its log (is the disk full?)",
        )
    if stage == BUILD and job.rc == NOT_OURS_EXIT and "NCCL not found" in log:
        return environment(TOOLCHAIN, f"build: {_first_match(re.compile('NCCL not found'), log)}")
    if stage == BUILD and job.rc == SHELL_NOT_FOUND:
        line = _first_match(re.compile(r"not found|No such file", re.I), log)
        return environment(
            TOOLCHAIN, f"build: the toolchain is missing on {job.node or 'the node'}" + (f" ({line})" if line else "")
        )
    if job.rc in KILLED:
        what = "the compiler" if stage == BUILD else "the job"
        return environment(
            TOOLCHAIN if stage == BUILD else HOST_OOM,
            f"{stage}: {what} was killed from outside (SIGKILL, not at its timeout: "
            "the host's OOM killer or an operator)",
        )
    return candidate("failed", f"{stage} failed with exit code {job.rc}")


def of_judge(stage: str, result: dict) -> Fault | None:
    """An environment fault the harness itself reports in its result.json (already checked to carry the
    job's nonce): its own setup failed before any candidate code ran (a GPU it could not use, memory it
    could not get). `{"environment": {"kind": ..., "reason": ...}}`; None when there is none."""
    env = result.get("environment")
    if not isinstance(env, dict) or not isinstance(env.get("reason"), str):
        return None
    kind = env.get("kind")
    known = {NO_SPACE, HOST_OOM, TOOLCHAIN, GPU}
    return environment(kind if kind in known else EXECUTOR, f"{stage}: {env['reason'][:300]}")


def of_exception(exc: BaseException) -> Fault:
    """The fault of an exception raised while evaluating (by an executor, the store or the file system).
    None of these come from the candidate's code, which only ever runs inside a job."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NoUsableNode):
        return environment(NO_NODE, f"no node can run the job: {exc}")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return environment(NO_SPACE, f"no space left on device ({exc.filename or text})")
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return environment(HOST_OOM, f"the host is out of memory ({text})")
    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return environment(STORE, f"cannot write {exc.filename or 'the project home'} ({exc.strerror})")
    if isinstance(exc, MemoryError):
        return environment(HOST_OOM, "the engine's host is out of memory")
    if isinstance(exc, sqlite3.OperationalError) and _STORE_TROUBLE.search(str(exc)):
        kind = NO_SPACE if "full" in str(exc) else STORE
        return environment(kind, f"the store could not be written: {exc}")
    if isinstance(exc, (ConnectionError, EOFError)) or type(exc).__module__.startswith("asyncssh"):
        return environment(NODE_LOST, f"the connection to a node was lost ({text})")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return environment(EXECUTOR, "the executor did not answer in time")
    return environment(EXECUTOR, f"evaluation error: {text}")


def is_environment_error(exc: BaseException) -> bool:
    """An engine-side error (a failed write) the run should pause on rather than fail: the disk or the
    store, not a bug."""
    return of_exception(exc).kind in (NO_SPACE, STORE, HOST_OOM)
