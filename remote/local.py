"""The embedded default executor: jobs are subprocesses on this machine.

Each job runs in its own directory and its own process group (a new session), so a timeout or a cancel
kills the whole group, grandchildren included; and in the sandbox (remote/sandbox.py): an allow-listed
environment, its own pid namespace and /proc, the file system read-only but for its directory.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

from . import interference
from .gpus import detect_local_gpus
from .jobs import Executor, JobResult, JobSpec, JobStatus, NodeState, tail_text
from .sandbox import job_environment, wrap
from .slots import SlotTable

KILL_GRACE_S = 2.0


def job_dir_name(job_id: str) -> str:
    """A job's directory: its id, then this process and a clock, so two attempts never share one."""
    return f"{job_id}-{os.getpid()}-{time.monotonic_ns()}"


def job_id_of(dir_name: str) -> str:
    """The job id a directory named by `job_dir_name` belongs to."""
    return dir_name.rsplit("-", 2)[0]


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalExecutor(Executor):
    """Runs jobs as local subprocesses with a CPU concurrency limit and GPU slot leases."""

    def __init__(
        self,
        work_dir: Path | None = None,
        cpu_slots: int | None = None,
        gpus: list[int] | None = None,
        keep_job_dirs: bool = False,
        extra_env: dict[str, str] | None = None,
    ):
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="cuco-jobs-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.slots = SlotTable(cpu_slots or max(1, os.cpu_count() or 1), detect_local_gpus() if gpus is None else gpus)
        self.keep_job_dirs = keep_job_dirs
        self.extra_env = dict(extra_env or {})  # e.g. CUCO_PYTHON: which interpreter has the NCCL wheel
        self._running: dict[str, int] = {}  # job_id -> pgid
        self._finished = 0
        self._failures = 0

    async def start(self) -> None:
        return None

    @property
    def max_gpus_per_job(self) -> int:
        return len(self.slots.gpu_ids)

    def nodes(self) -> list[NodeState]:
        return [
            NodeState(
                name="local",
                gpus_total=len(self.slots.gpu_ids),
                gpus_busy=self.slots.gpus_busy,
                cpu_slots=self.slots.cpu_slots,
                cpu_busy=self.slots.cpu_busy,
                running_jobs=len(self._running),
                failures=self._failures,
            )
        ]

    async def run(self, spec: JobSpec) -> JobResult:
        async with self.slots.lease(spec.gpus, spec.cpus) as gpus:
            return await self._run_leased(spec, gpus)

    async def _run_leased(self, spec: JobSpec, gpus: tuple[int, ...]) -> JobResult:
        job_dir = self.work_dir / job_dir_name(spec.job_id)
        job_dir.mkdir(parents=True)
        started = time.monotonic()
        try:
            for rel, data in spec.files.items():
                dest = job_dir / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            for rel in spec.executable:
                (job_dir / rel).chmod(0o755)
            env = job_environment(self.extra_env, dict(spec.env))
            if spec.gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
            program = spec.argv[0] if "/" not in spec.argv[0] else str(job_dir / spec.argv[0])
            if shutil.which(program, path=env.get("PATH", os.defpath)) is None:  # the sandbox would hide why
                return JobResult(
                    spec.job_id,
                    JobStatus.ERROR,
                    duration_s=time.monotonic() - started,
                    gpus=gpus,
                    error=f"cannot start {spec.argv[0]}: no such program (or not executable)",
                )
            log_path = job_dir / ".log"
            with open(log_path, "wb") as log:
                try:
                    proc = await asyncio.create_subprocess_exec(
                        *wrap(spec.argv, gpus=spec.gpus > 0, keep=env),
                        cwd=job_dir,
                        env=env,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=log,
                        stderr=asyncio.subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as exc:
                    return JobResult(
                        spec.job_id,
                        JobStatus.ERROR,
                        error=f"cannot start {spec.argv[0]}: {exc}",
                        duration_s=time.monotonic() - started,
                        gpus=gpus,
                    )
                self._running[spec.job_id] = proc.pid
                around = interference.sample()
                (job_dir / ".pgid").write_text(str(proc.pid))  # for reconcile after an engine crash
                status = JobStatus.OK
                try:
                    await asyncio.wait_for(proc.wait(), timeout=spec.timeout_s)
                except TimeoutError:
                    status = JobStatus.TIMEOUT
                    await self._terminate(proc)
                except asyncio.CancelledError:
                    await asyncio.shield(self._terminate(proc))
                    raise
                finally:
                    self._running.pop(spec.job_id, None)
                    # Stragglers the job left in its group (e.g. a forked helper) die with it.
                    kill_group(proc.pid)
                seen = interference.between(around, interference.sample(), spec.cpus)
            outputs = {}
            for rel in spec.outputs:
                p = job_dir / rel
                if p.is_file():
                    outputs[rel] = p.read_bytes()
            log_text = tail_text(log_path.read_bytes())
            rc = proc.returncode
            if status is not JobStatus.OK or rc != 0:
                self._failures += 1
            self._finished += 1
            return JobResult(
                spec.job_id,
                status,
                rc=rc,
                log=log_text,
                outputs=outputs,
                gpus=gpus,
                duration_s=time.monotonic() - started,
                error=f"timed out after {spec.timeout_s:g} s" if status is JobStatus.TIMEOUT else "",
                interference=None if seen is None else seen.as_dict(),
            )
        finally:
            if not self.keep_job_dirs:
                shutil.rmtree(job_dir, ignore_errors=True)

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=KILL_GRACE_S)
        except TimeoutError:
            pass
        kill_group(proc.pid, signal.SIGKILL)
        try:
            await asyncio.wait_for(proc.wait(), timeout=KILL_GRACE_S)
        except TimeoutError:
            pass

    async def reconcile(self, keep: set[str], mine: str) -> list[str]:
        """Kill what a dead engine of this run left running here. Local jobs are never adopted: the engine
        runs unfinished ones again, so every leftover group of the run's jobs is killed (keep is accepted
        for the interface). Another run's job directories, in flight beside it, are left alone."""
        owned = re.compile(mine)
        killed = []
        for job_dir in self.work_dir.iterdir() if self.work_dir.is_dir() else []:
            if not owned.fullmatch(job_id_of(job_dir.name)):
                continue
            pgid_file = job_dir / ".pgid"
            if pgid_file.is_file():
                try:
                    pgid = int(pgid_file.read_text())
                    cwd = Path(os.readlink(f"/proc/{pgid}/cwd")).resolve()
                except (OSError, ValueError):
                    cwd = None
                if cwd is not None and cwd == job_dir.resolve():  # still ours, not a recycled pid
                    kill_group(pgid)
                    killed.append(job_dir.name)
            shutil.rmtree(job_dir, ignore_errors=True)
        return killed

    async def close(self) -> None:
        for pgid in list(self._running.values()):
            kill_group(pgid)
        self._running.clear()
        if self._own_dir and not self.keep_job_dirs:
            shutil.rmtree(self.work_dir, ignore_errors=True)
