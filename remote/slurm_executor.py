"""The Slurm executor: runs `JobSpec`s through a cluster's own scheduler (a cluster file of kind slurm).

Per job: upload missing blobs to the shared work dir, write the batch script there and `sbatch --parsable`
it from the login node (over the SSH pool, or here); one poll loop asks `squeue` (and `sacct`, for jobs
squeue no longer lists) about every job in flight at once, with backoff; a finished job's log tail, exit
code and outputs come back in one command. Cancelling runs `scancel`. A job Slurm ends for the cluster's
reasons (NODE_FAIL, PREEMPTED, BOOT_FAIL, cancelled from outside, vanished) is submitted again, up to
max_attempts, then reported LOST with the Slurm state in `error`. `run` is idempotent by job id: a job a
previous engine submitted (its Slurm id is in the job directory) is adopted, never submitted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .blobs import BlobCache, BlobUploadError
from .errors import InputError
from .hostkeys import HostKeyRefused
from .jobs import Executor, JobResult, JobSpec, JobStatus, NodeState, NoUsableNode, SubmittedHook, tail_text
from .login_shell import open_login_shell
from .remote_job import (
    EXIT_MISSING_BLOBS,
    MISSING_MARK,
    kill_script,
    read_result,
    remove_script,
    run_script,
    spec_problem,
)
from .slurm_commands import (
    ACTIVE_STATES,
    LOST_STATES,
    batch_script,
    cancel_script,
    collect_script,
    gpus_script,
    init_script,
    is_limit_refusal,
    limit_named,
    parse_gres_gpus,
    parse_poll,
    poll_script,
    reconcile_script,
    refused_field,
    submit_script,
    test_only_script,
)
from .slurm_config import SlurmClusterConfig, StagePlacement, load_slurm_cluster
from .ssh_connect import SSHContext
from .ssh_pool import NodeDown

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 120.0  # one command on the login node (submit, poll, collect, cancel)
LIMIT_RETRY_S = (2.0, 30.0)  # a submission refused for the user's job limit is tried again after this
TERMINAL_CONFIRMATIONS = 2  # polls that must see a job ended without its exit code before it is judged
VANISHED_AFTER = 3  # polls that must miss a job (squeue and sacct) before it counts as vanished

load_config = load_slurm_cluster  # the registry's entry points (remote.registry)


def from_config(config: SlurmClusterConfig, home: Path) -> SlurmExecutor:
    # CUCO_PYTHON: the interpreter with the NCCL wheel, when the jobs' nodes share this machine's files.
    extra = {"CUCO_PYTHON": sys.executable} if config.login is None else {}
    return SlurmExecutor(config, home, extra_env=extra)


class ClusterError(Exception):
    """The login node cannot be used (unreachable, no Slurm commands, work dir not writable)."""


@dataclass
class _Tracked:
    job_id: str
    slurm_id: str
    kind: str
    state: str = "SUBMITTED"
    reason: str = ""
    ended_seen: int = 0
    misses: int = 0
    cancelled: bool = False
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class SlurmExecutor(Executor):
    def __init__(
        self,
        config: SlurmClusterConfig,
        home: Path,
        *,
        user_known_hosts: list[Path] | None = None,
        keep_job_dirs: bool = False,
        extra_env: dict[str, str] | None = None,
    ):
        self.cfg = config
        self.home = Path(home)
        self.keep_job_dirs = keep_job_dirs
        self.shell = open_login_shell(
            config.login, lambda: SSHContext.from_cluster(config, self.home, user_known_hosts), extra_env
        )
        self.work_dir: str | None = None
        self.blobs: BlobCache | None = None
        self._gpus = config.gpus_per_node or 0
        self._tracked: dict[str, _Tracked] = {}  # Slurm id -> job in flight
        self._in_flight = asyncio.Semaphore(config.max_jobs)
        self._wake = asyncio.Event()
        self._room = asyncio.Event()  # set (and replaced) when one of cuco's Slurm jobs ends
        self._poller: asyncio.Task | None = None
        self._closing = False
        self._note = ""  # why submissions wait, or why polls fail
        self.failures = 0  # jobs Slurm lost (submitted again)
        self.polls = 0  # squeue calls (tests and the bench count them)
        self.submissions = 0  # sbatch calls that queued a job
        self.limit_refusals = 0  # sbatch calls refused for the user's job limit
        self.external_ids: dict[str, str] = {}  # cuco job id -> Slurm job id (jobs in flight)
        # Told each job's Slurm id when it is submitted or adopted (the engine stores it: jobs.external_id).
        self._on_submitted: SubmittedHook | None = None

    # ---- Executor protocol --------------------------------------------------------------------
    async def start(self) -> None:
        """Reach the login node, prepare the work dir, read the GPUs per node, and have Slurm accept the
        partition, account, QoS and constraint of each stage (`sbatch --test-only`): a value it refuses is
        an InputError naming the cluster file's field."""
        try:
            await self._prepare()
        except (TimeoutError, NodeDown, HostKeyRefused, BlobUploadError, ClusterError, OSError) as exc:
            raise NoUsableNode(
                f"the Slurm login node of {self.cfg.path} cannot be used: {str(exc) or type(exc).__name__}"
            ) from None
        self._poller = asyncio.create_task(self._poll_loop(), name="slurm-poll")

    async def _prepare(self) -> None:
        res = await self.shell.run(init_script(self.cfg.work_dir), timeout=COMMAND_TIMEOUT_S)
        if res.exit_status != 0:
            raise ClusterError(f"cannot create the work dir {self.cfg.work_dir}: {str(res.stderr).strip()}")
        blobs, missing = [], []
        for line in str(res.stdout).splitlines():
            tag, _, val = line.partition(" ")
            if tag == "WORKDIR":
                self.work_dir = val.strip()
            elif tag == "BLOB":
                blobs.append(val.strip())
            elif tag == "MISSING":
                missing.append(val.strip())
        essential = [c for c in missing if c in ("sbatch", "squeue", "scancel")]
        if essential or not self.work_dir:
            raise ClusterError(
                f"no {', '.join(essential)} on the login node (is Slurm's client installed "
                f"and on PATH? add a setup line?)"
                if essential
                else "no work dir"
            )
        self.blobs = BlobCache(self.shell, self.work_dir, blobs)
        if self.cfg.gpus_per_node is None:
            out = await self.shell.run(gpus_script(self.cfg.run.partition), timeout=COMMAND_TIMEOUT_S)
            self._gpus = parse_gres_gpus(str(out.stdout))
        for stage in ("build", "run"):
            placement = self.cfg.placement(stage)
            if placement.where == "slurm":
                await self._test_only(placement, gpus=min(1, self._gpus) if stage == "run" else 0)

    async def _test_only(self, placement: StagePlacement, gpus: int) -> None:
        res = await self.shell.run(
            test_only_script(placement, gpus=gpus, gpu_request=self.cfg.gpu_request), timeout=COMMAND_TIMEOUT_S
        )
        text = str(res.stdout).strip()
        if res.exit_status == 0:
            return
        if is_limit_refusal(text):
            # The values are fine; the user is at a job limit now (e.g. this run's own jobs, still queued from
            # before a restart): submissions will wait for room.
            self._limit_note(text)
            return
        fld = refused_field(text)
        message = " ".join(text.split())[:400] or f"sbatch --test-only exited {res.exit_status}"
        if fld == "gpus_per_node":
            raise InputError(
                str(self.cfg.path),
                "gpu_request",
                f"Slurm refuses the GPU request ({message}); try gpu_request: gres or gpus",
            )
        if fld is not None and fld != "time_limit":
            value = getattr(placement, fld, None)
            raise InputError(
                str(self.cfg.path),
                placement.field_of(fld),
                f"Slurm refuses {fld} {value!r}: {message} (`sinfo -s` lists partitions; "
                f"`sacctmgr show assoc user=$USER` your accounts and QoS)",
            )
        raise InputError(
            str(self.cfg.path),
            placement.field,
            f"Slurm refuses a test submission for {placement.field} jobs: {message}",
        )

    @property
    def max_gpus_per_job(self) -> int:
        return self._gpus

    def watch_submissions(self, hook: SubmittedHook | None) -> None:
        self._on_submitted = hook

    def nodes(self) -> list[NodeState]:
        states = [t for t in self._tracked.values() if not t.done.done()]
        running = sum(1 for t in states if t.state == "RUNNING")
        pending = Counter(t.reason or "None" for t in states if t.state in ("PENDING", "SUBMITTED"))
        detail = f"{running} running, {sum(pending.values())} pending"
        if pending:
            detail += " (" + ", ".join(f"{r}: {n}" for r, n in pending.most_common()) + ")"
        if self._note:
            detail += f"; {self._note}"
        name = f"slurm:{self.cfg.run.partition or 'default'}"
        queue = {t.job_id: t.state + (f": {t.reason}" if t.state == "PENDING" and t.reason else "") for t in states}
        return [
            NodeState(
                name=name,
                healthy=not self._note.startswith("squeue"),
                gpus_total=self._gpus,
                gpus_busy=0,
                running_jobs=running,
                failures=self.failures,
                detail=detail,
                pending=dict(pending),
                queue=queue,
            )
        ]

    async def run(self, spec: JobSpec) -> JobResult:
        bad = self._check_spec(spec)
        if bad:
            return JobResult(spec.job_id, JobStatus.ERROR, error=bad, node="")
        started = time.monotonic()
        last = ""
        attempts = 0
        while attempts < self.cfg.max_attempts:
            if self._closing:
                return JobResult(spec.job_id, JobStatus.CANCELLED, error="executor closed", attempts=attempts)
            attempts += 1
            if self.cfg.placement(spec.kind).where == "login":
                result = await self._run_on_login(spec)
            else:
                async with self._in_flight:
                    result = await self._run_in_slurm(spec)
            if result.status is JobStatus.LOST and not self._closing:
                last = result.error
                self.failures += 1
                log.warning("%s: %s; submitting it again", spec.job_id, last)
                continue
            result.attempts = attempts
            result.duration_s = time.monotonic() - started
            return result
        return JobResult(
            spec.job_id,
            JobStatus.LOST,
            node="",
            attempts=attempts,
            duration_s=time.monotonic() - started,
            error=f"gave up after {attempts} attempts: {last}",
        )

    async def close(self) -> None:
        """Cancel every job still in flight (one scancel), stop polling, close the login connection."""
        self._closing = True
        live = {t.job_id: t.slurm_id for t in self._tracked.values() if not t.done.done()}
        for t in self._tracked.values():
            t.cancelled = True
        if live and self.work_dir:
            await self._quiet(
                self.shell.run(cancel_script(self.work_dir, live, not self.keep_job_dirs), timeout=COMMAND_TIMEOUT_S)
            )
        for t in self._tracked.values():
            if not t.done.done():
                t.done.set_result("CANCELLED")
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._poller, 10)
        await self._quiet(self.shell.close())

    async def reconcile(self, keep: set[str], mine: str) -> list[str]:
        """Cancel (and remove) every job of this run (its cuco job id matches `mine`) that Slurm still has,
        and every such job directory, whose cuco job id is not in `keep`. Returns the ids of jobs that Slurm still had queued or running."""
        if self.work_dir is None:
            return []
        keep = set(keep) | {t.job_id for t in self._tracked.values()}
        try:
            res = await self.shell.run(
                reconcile_script(self.work_dir, mine),
                timeout=COMMAND_TIMEOUT_S,
                input="".join(f"{k}\n" for k in sorted(keep)),
            )
        except (TimeoutError, NodeDown):
            return []
        return sorted(line.split(" ", 1)[1] for line in str(res.stdout).splitlines() if line.startswith("CANCELLED "))

    # ---- one job ------------------------------------------------------------------------------
    def _check_spec(self, spec: JobSpec) -> str:
        bad = spec_problem(spec.job_id, spec.env)
        if bad:
            return bad
        if spec.gpus > self._gpus:
            return f"job {spec.job_id} needs {spec.gpus} GPUs; the cluster's nodes have at most {self._gpus}"
        return ""

    async def _links(self, spec: JobSpec) -> list[tuple[str, str, bool]]:
        assert self.blobs is not None
        shas = await self.blobs.ensure(spec.files)
        execs = set(spec.executable)
        return [(sha, rel, rel in execs) for rel, sha in shas.items()]

    async def _submit(self, spec: JobSpec) -> str:
        """The job's Slurm id: submitted now, or adopted when a previous engine submitted it."""
        assert self.work_dir is not None
        placement = self.cfg.placement(spec.kind)
        script = batch_script(
            f"{self.work_dir}/jobs/{spec.job_id}",
            spec,
            placement,
            gpu_request=self.cfg.gpu_request,
            setup=self.cfg.setup,
            kill_grace_s=self.cfg.kill_grace_s,
            slack_s=self.cfg.time_slack_s,
        )
        wait = LIMIT_RETRY_S[0]
        lost_blobs = 0
        idle_since: float | None = None  # refused for the limit with none of cuco's jobs in Slurm since
        while not self._closing:
            links = await self._links(spec)
            res = await self.shell.run(
                submit_script(self.work_dir, spec.job_id, links), input=script, timeout=COMMAND_TIMEOUT_S
            )
            out = str(res.stdout).strip()
            if res.exit_status == EXIT_MISSING_BLOBS:
                assert self.blobs is not None
                self.blobs.forget(str(res.stderr).split(MISSING_MARK, 1)[-1].split())
                lost_blobs += 1
                if lost_blobs > 2:
                    raise _Refused(f"could not submit {spec.job_id}: the login node keeps losing uploaded files")
                continue
            tag, _, val = out.partition(" ")
            if res.exit_status == 0 and tag in ("SUBMITTED", "ADOPT"):
                self.submissions += tag == "SUBMITTED"
                self._note = ""
                return val.strip()
            if tag == "REFUSED" and is_limit_refusal(val):
                self.limit_refusals += 1
                # The cluster's limit on the user's jobs: back-pressure, not the job's fault. Wait until one of
                # cuco's jobs ends (or `wait` passes), then try again.
                if self._in_slurm():
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                if idle_since is not None and time.monotonic() - idle_since >= self.cfg.limit_wait_s:
                    raise _Refused(self._limit_give_up(spec.job_id, val))
                self._limit_note(val)
                await self._wait_for_room(wait)
                wait = min(wait * 2, LIMIT_RETRY_S[1])
                continue
            fld = refused_field(val) if tag == "REFUSED" else None
            where = f" (check {placement.field_of(fld)} in {self.cfg.path})" if fld else ""
            raise _Refused(f"sbatch refused {spec.job_id}: {val.strip() or out or res.stderr}{where}")
        raise _Refused(f"{spec.job_id} was not submitted: the executor is closing")

    def _in_slurm(self) -> int:
        return sum(1 for t in self._tracked.values() if not t.done.done())

    def _limit_note(self, refusal: str) -> None:
        note = (
            f"submissions wait: Slurm refuses more jobs of yours ({limit_named(refusal)}); they go in as "
            f"cuco's jobs end (max_jobs in {self.cfg.path} keeps cuco under the limit)"
        )
        if note != self._note:
            log.warning("%s", note)
        self._note = note

    def _limit_give_up(self, job_id: str, refusal: str) -> str:
        return (
            f"Slurm kept refusing {job_id} ({limit_named(refusal)}) for {self.cfg.limit_wait_s:g} s with none "
            f"of cuco's jobs in its queue: other jobs of yours fill the limit (squeue -u $USER), or it allows "
            f"none; wait for them, or use a QoS or account with a higher limit "
            f"(`sacctmgr show qos`, `sacctmgr show assoc user=$USER`)"
        )

    async def _wait_for_room(self, seconds: float) -> None:
        """Until one of cuco's Slurm jobs ends (making room under the cluster's limit), at most `seconds`."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._room.wait(), seconds)

    def _job_left(self) -> None:
        self._room.set()
        self._room = asyncio.Event()

    async def _run_in_slurm(self, spec: JobSpec) -> JobResult:
        try:
            slurm_id = await self._submit(spec)
        except _Refused as exc:
            status = JobStatus.CANCELLED if self._closing else JobStatus.ERROR
            return JobResult(spec.job_id, status, node="", error=str(exc))
        except (TimeoutError, NodeDown, HostKeyRefused, BlobUploadError) as exc:
            return JobResult(spec.job_id, JobStatus.LOST, node="", error=f"submission failed: {exc}")
        t = _Tracked(spec.job_id, slurm_id, spec.kind)
        self._tracked[slurm_id] = t
        self.external_ids[spec.job_id] = slurm_id
        self._wake.set()
        if self._on_submitted is not None:
            self._on_submitted(spec.job_id, slurm_id, "slurm")
        try:
            ended = await t.done
            return await self._collect(spec, t, ended)
        except asyncio.CancelledError:
            t.cancelled = True
            if self.work_dir and not self._closing:
                await asyncio.shield(
                    self._quiet(
                        self.shell.run(
                            cancel_script(self.work_dir, {spec.job_id: slurm_id}, not self.keep_job_dirs),
                            timeout=COMMAND_TIMEOUT_S,
                        )
                    )
                )
            raise
        finally:
            self._tracked.pop(slurm_id, None)
            self.external_ids.pop(spec.job_id, None)
            self._job_left()

    async def _collect(self, spec: JobSpec, t: _Tracked, ended: str) -> JobResult:
        assert self.work_dir is not None
        node = f"slurm:{t.slurm_id}"
        if ended == "CANCELLED" and t.cancelled:
            return JobResult(spec.job_id, JobStatus.CANCELLED, node=node, error="cancelled (scancel)")
        try:
            res = await self.shell.run(
                collect_script(self.work_dir, spec.job_id, spec.outputs, False), timeout=COMMAND_TIMEOUT_S, binary=True
            )
            members = read_result(res.stdout or b"") if res.exit_status == 0 else {}
        except (TimeoutError, NodeDown) as exc:
            return JobResult(spec.job_id, JobStatus.LOST, node=node, error=f"could not read the result: {exc}")
        except tarfile.TarError as exc:
            members = {}
            log.warning("%s: unreadable result: %s", spec.job_id, exc)
        result = self._result(spec, t, ended, members)
        if not self.keep_job_dirs or result.status is JobStatus.LOST:
            # A lost job's directory goes, so that its next submission is not taken for this one.
            await self._quiet(self.shell.run(remove_script(self.work_dir, [spec.job_id]), timeout=COMMAND_TIMEOUT_S))
        return result

    @staticmethod
    def _result(spec: JobSpec, t: _Tracked, ended: str, members: dict[str, bytes]) -> JobResult:
        node = f"slurm:{t.slurm_id}"
        logtail = tail_text(members.get("logtail", b""))
        outputs = {rel: members[f"work/{rel}"] for rel in spec.outputs if f"work/{rel}" in members}
        rc_text = members.get("rc", b"").decode().strip()
        if rc_text.lstrip("-").isdigit():
            rc = int(rc_text)
            if "timedout" in members:
                return JobResult(
                    spec.job_id,
                    JobStatus.TIMEOUT,
                    rc=rc,
                    node=node,
                    log=logtail,
                    outputs=outputs,
                    error=f"timed out after {spec.timeout_s:g} s",
                )
            return JobResult(spec.job_id, JobStatus.OK, rc=rc, node=node, log=logtail, outputs=outputs)
        if ended == "TIMEOUT":
            return JobResult(
                spec.job_id,
                JobStatus.TIMEOUT,
                node=node,
                log=logtail,
                error=f"Slurm ended job {t.slurm_id} at its time limit (TIMEOUT)",
            )
        if ended in LOST_STATES or ended in ("CANCELLED", "VANISHED"):
            why = {
                "CANCELLED": "was cancelled outside cuco (CANCELLED)",
                "VANISHED": "vanished from squeue and sacct",
            }.get(ended, f"ended with {ended}")
            return JobResult(spec.job_id, JobStatus.LOST, node=node, log=logtail, error=f"Slurm job {t.slurm_id} {why}")
        hint = "; raise its memory with extra_sbatch: ['--mem=...']" if ended == "OUT_OF_MEMORY" else ""
        return JobResult(
            spec.job_id,
            JobStatus.ERROR,
            node=node,
            log=logtail,
            error=f"Slurm job {t.slurm_id} ended {ended} without an exit code{hint}",
        )

    async def _run_on_login(self, spec: JobSpec) -> JobResult:
        """A build placed on the login node: run there directly, like an SSH job."""
        assert self.work_dir is not None
        started = time.monotonic()
        done = False
        try:
            for _ in range(2):
                links = await self._links(spec)
                script = run_script(
                    self.work_dir,
                    spec.job_id,
                    links,
                    spec.argv,
                    dict(spec.env),
                    self.cfg.setup,
                    spec.timeout_s,
                    self.cfg.kill_grace_s,
                    spec.outputs,
                    gpus=spec.gpus > 0,
                )
                res = await self.shell.run(script, timeout=spec.timeout_s + self.cfg.kill_grace_s + 60, binary=True)
                if res.exit_status == EXIT_MISSING_BLOBS:
                    assert self.blobs is not None
                    self.blobs.forget((res.stderr or b"").decode().split(MISSING_MARK, 1)[-1].split())
                    continue
                break
            done = True
            members = read_result(res.stdout or b"") if res.exit_status == 0 else {}
        except (TimeoutError, NodeDown, BlobUploadError, tarfile.TarError) as exc:
            return JobResult(
                spec.job_id,
                JobStatus.LOST,
                node="login",
                error=f"login node: {exc}",
                duration_s=time.monotonic() - started,
            )
        finally:
            if not done:
                await asyncio.shield(
                    self._quiet(
                        self.shell.run(
                            kill_script(self.work_dir, spec.job_id, self.cfg.kill_grace_s), timeout=COMMAND_TIMEOUT_S
                        )
                    )
                )
        if not self.keep_job_dirs:
            await self._quiet(self.shell.run(remove_script(self.work_dir, [spec.job_id]), timeout=COMMAND_TIMEOUT_S))
        result = self._result(spec, _Tracked(spec.job_id, "login", spec.kind), "VANISHED", members)
        result.node = "login"
        return result

    # ---- the poll loop ------------------------------------------------------------------------
    async def _poll_loop(self) -> None:
        interval = self.cfg.poll_min_s
        while not self._closing:
            if not self._tracked:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 60)
                interval = self.cfg.poll_min_s
                continue
            self._wake.clear()
            changed = await self._poll_once()
            interval = self.cfg.poll_min_s if changed else min(interval * 2, self.cfg.poll_max_s)
            await asyncio.sleep(self.cfg.poll_min_s)
            with contextlib.suppress(asyncio.TimeoutError):  # a new submission polls sooner
                await asyncio.wait_for(self._wake.wait(), max(interval - self.cfg.poll_min_s, 0.0))
            if self._wake.is_set():
                interval = self.cfg.poll_min_s

    async def _poll_once(self) -> bool:
        """One squeue (+ sacct) for every job in flight; resolve those that ended. True if anything changed."""
        tracked = [t for t in self._tracked.values() if not t.done.done()]
        if not tracked or self.work_dir is None:
            return False
        try:
            res = await self.shell.run(
                poll_script(self.work_dir, [t.slurm_id for t in tracked], [t.job_id for t in tracked]),
                timeout=COMMAND_TIMEOUT_S,
            )
        except (TimeoutError, NodeDown, HostKeyRefused, OSError) as exc:
            self._note = f"squeue: the login node did not answer: {exc}"
            return False
        self.polls += 1
        polled = parse_poll(str(res.stdout))
        if polled.error:
            # slurmctld not answering: nothing can be judged from this poll.
            self._note = f"squeue failed: {polled.error}"
            return False
        if self._note.startswith("squeue"):
            self._note = ""
        changed = False
        for t in tracked:
            state, reason = polled.states.get(t.slurm_id, ("", ""))
            if state and (state, reason) != (t.state, t.reason):
                t.state, t.reason, changed = state, reason, True
            if t.job_id in polled.finished:
                t.done.set_result(state or "COMPLETED")
            elif not state:
                t.misses += 1
                if t.misses >= VANISHED_AFTER:
                    t.done.set_result("VANISHED")
            elif state not in ACTIVE_STATES:
                # Ended without an exit code so far: look once more (a shared filesystem may lag).
                t.misses = 0
                t.ended_seen += 1
                if t.ended_seen >= TERMINAL_CONFIRMATIONS or state in LOST_STATES:
                    t.done.set_result(state)
            else:
                t.misses = 0
            changed |= t.done.done()
        return changed

    @staticmethod
    async def _quiet(aw) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(aw, 60)


class _Refused(Exception):
    """sbatch refused the job for a reason other than the user's job limit."""
