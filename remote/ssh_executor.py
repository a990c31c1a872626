"""The SSH executor: runs `JobSpec`s on the nodes of a cluster.yaml.

Per job: choose the least loaded node that can ever fit it, lease its slots there (GPUs atomically),
upload missing blobs, run the remote wrapper (`remote_job.run_script`) on one pooled channel and read
back a tar of the exit code, log tail and outputs. A node that drops mid-job has the job requeued on
another node (`JobResult.attempts`); a node failing often is quarantined. `run` is idempotent by job id:
a job directory left on a node by an engine that died is collected (finished) or adopted (running).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import tarfile
import time
from pathlib import Path

from .blobs import BlobUploadError
from .cluster import ClusterConfig, load_cluster
from .hostkeys import HostKeyRefused
from .jobs import Executor, JobResult, JobSpec, JobStatus, NodeState, NoUsableNode, tail_text
from .remote_job import EXIT_MISSING_BLOBS, MISSING_MARK, read_result, reconcile_script, run_script, spec_problem
from .ssh_connect import SSHContext
from .ssh_node import RemoteNode
from .ssh_pool import NodeDown, out_text

SETUP_ALLOWANCE_S = 60.0  # local backstop beyond the remote timeout (setup lines, transfers)
START_TIMEOUT_S = 60.0


__all__ = ["NoUsableNode", "SSHExecutor", "from_config", "load_config"]

load_config = load_cluster  # the registry's entry points (remote.registry)


def from_config(config: ClusterConfig, home: Path) -> SSHExecutor:
    return SSHExecutor(config, home=home)


class SSHExecutor(Executor):
    def __init__(
        self,
        cluster: ClusterConfig,
        home: Path,
        *,
        user_known_hosts: list[Path] | None = None,
        ctx: SSHContext | None = None,
        keep_job_dirs: bool = False,
    ):
        self.cluster = cluster
        self.home = Path(home)
        self.ctx = ctx or SSHContext.from_cluster(cluster, self.home, user_known_hosts)
        self.keep_job_dirs = keep_job_dirs
        self._nodes = [RemoteNode(n, self.ctx, cluster.quarantine, cluster.kill_grace_s) for n in cluster.nodes]
        self._closing = False
        self._tasks: set[asyncio.Task] = set()

    # ---- Executor protocol --------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to every node (in parallel); raise NoUsableNode when none can be used."""
        await self._ready_all()
        if not any(n.ready for n in self._nodes):
            reasons = "; ".join(f"{n.name}: {n.state().detail}" for n in self._nodes)
            raise NoUsableNode(f"no node of {self.cluster.path} can be used: {reasons}")

    async def _ready_all(self, only_pending: bool = False) -> None:
        """Connect to (and prepare) each usable node that is not ready yet; a failure counts towards
        the node's quarantine."""

        async def one(n: RemoteNode) -> None:
            try:
                await asyncio.wait_for(n.ensure_ready(), START_TIMEOUT_S)
            except (TimeoutError, NodeDown, HostKeyRefused) as exc:
                n.record_failure(str(exc) or "timed out connecting")

        todo = [n for n in self._nodes if n.usable() and (not only_pending or not n.ready or n.orphans)]
        if todo:
            await asyncio.gather(*(one(n) for n in todo))

    @property
    def max_gpus_per_job(self) -> int:
        return max((len(n.slots.gpu_ids) for n in self._nodes if n.slots is not None), default=0)

    def nodes(self) -> list[NodeState]:
        return [n.state() for n in self._nodes]

    def node(self, name: str) -> RemoteNode:
        for n in self._nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    async def run(self, spec: JobSpec) -> JobResult:
        bad = self._check_spec(spec)
        if bad:
            return JobResult(spec.job_id, JobStatus.ERROR, error=bad, node="")
        attempts = 0
        tried: set[str] = set()
        last_error = ""
        started = time.monotonic()
        while attempts < self.cluster.max_attempts:
            if self._closing:
                return JobResult(spec.job_id, JobStatus.CANCELLED, error="executor closed", attempts=attempts)
            try:
                node = await self._choose(spec, tried)
            except NoUsableNode as exc:
                status = JobStatus.ERROR if "GPUs" in str(exc) and "no node has" in str(exc) else JobStatus.LOST
                return JobResult(
                    spec.job_id,
                    status,
                    error=str(exc) + (f" (last: {last_error})" if last_error else ""),
                    node="",
                    attempts=attempts,
                    duration_s=time.monotonic() - started,
                )
            attempts += 1
            tried.add(node.name)
            try:
                result = await self._run_on(node, spec)
            except (NodeDown, HostKeyRefused, BlobUploadError) as exc:
                if self._closing:
                    return JobResult(
                        spec.job_id, JobStatus.CANCELLED, error="executor closed", node=node.name, attempts=attempts
                    )
                last_error = str(exc)
                node.record_failure(last_error)
                node.orphans.add(spec.job_id)
                continue
            result.attempts = attempts
            return result
        return JobResult(
            spec.job_id,
            JobStatus.LOST,
            node="",
            attempts=attempts,
            duration_s=time.monotonic() - started,
            error=f"gave up after {attempts} attempts: {last_error}",
        )

    async def close(self) -> None:
        """Kill every job still running on the nodes, then close the connections."""
        self._closing = True

        async def kill_all(n: RemoteNode) -> None:
            if n.work_dir is None:
                return
            await asyncio.gather(*(self._quiet(n.kill_job(j, remove=not self.keep_job_dirs)) for j in list(n.running)))
            await n.flush_removals()

        await asyncio.gather(*(kill_all(n) for n in self._nodes))
        await asyncio.gather(*(n.pool.close() for n in self._nodes))

    async def reconcile(self, keep: set[str], mine: str) -> list[str]:
        """Kill (and remove) the job directories on every node whose ids `mine` matches (this run's) and are
        not in `keep`, except jobs this executor is running. Returns the ids of jobs that were still running and were killed;
        finished unwanted directories are removed silently."""
        await self._ready_all()
        keep = set(keep)
        for n in self._nodes:
            keep |= n.running

        async def one(n: RemoteNode) -> list[str]:
            if not n.ready or n.work_dir is None:
                return []
            try:
                res = await n.pool.run(
                    reconcile_script(n.work_dir, self.cluster.kill_grace_s, mine),
                    # never empty: an empty input sends no end-of-file, and the script's `cat` would wait
                    input="".join(f"{k}\n" for k in sorted(keep)) or "\n",
                    timeout=120,
                )
            except (TimeoutError, NodeDown):
                return []
            killed = []
            for line in out_text(res.stdout).splitlines():
                tag, _, job_id = line.partition(" ")
                n.existing_jobs.discard(job_id)
                if tag == "KILLED":
                    killed.append(job_id)
            return killed

        results = await asyncio.gather(*(one(n) for n in self._nodes))
        return sorted(j for r in results for j in r)

    # ---- internals ----------------------------------------------------------------------------
    @staticmethod
    async def _quiet(aw) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(aw, 30)

    def _check_spec(self, spec: JobSpec) -> str:
        return spec_problem(spec.job_id, spec.env)

    async def _choose(self, spec: JobSpec, tried: set[str]) -> RemoteNode:
        """The node for this attempt: where the job was left by a previous engine, else the least
        loaded usable node that can ever fit it (preferring nodes not tried yet)."""
        while True:
            await self._ready_all(only_pending=True)
            for n in self._nodes:
                if spec.job_id in n.existing_jobs and n.ready and n.usable() and n.name not in tried:
                    return n
            fits = [n for n in self._nodes if n.ready and n.slots is not None and n.slots.can_ever_fit(spec.gpus)]
            usable = [n for n in fits if n.usable()]
            fresh = [n for n in usable if n.name not in tried] or usable
            if fresh:
                return min(fresh, key=lambda n: n.load(spec.gpus, spec.cpus))
            # Nothing usable now: wait for a node to come out of backoff, unless none ever will.
            waiting = [
                n
                for n in self._nodes
                if not n.quarantined()
                and not n.host_key_error
                and (not n.ready or (n.slots is not None and n.slots.can_ever_fit(spec.gpus)))
            ]
            if not waiting:
                if any(n.ready for n in self._nodes) and not fits:
                    raise NoUsableNode(f"no node has {spec.gpus} GPUs (most: {self.max_gpus_per_job})")
                reasons = "; ".join(f"{n.name}: {n.state().detail}" for n in self._nodes)
                raise NoUsableNode(f"no usable node ({reasons})")
            wake = min(n.pool.down_until for n in waiting)
            await asyncio.sleep(min(max(wake - time.monotonic(), 0.05), 5.0))

    async def _run_on(self, node: RemoteNode, spec: JobSpec) -> JobResult:
        assert node.slots is not None
        weight_cpu = 0 if spec.gpus else spec.cpus
        node.assigned_cpus += weight_cpu
        node.assigned_gpus += spec.gpus
        try:
            async with node.slots.lease(spec.gpus, spec.cpus) as gpus:
                if not node.usable():
                    raise NodeDown(f"{node.name}: became unusable while the job waited for a slot")
                return await self._run_leased(node, spec, gpus)
        finally:
            node.assigned_cpus -= weight_cpu
            node.assigned_gpus -= spec.gpus

    async def _run_leased(self, node: RemoteNode, spec: JobSpec, gpus: tuple[int, ...]) -> JobResult:
        assert node.blobs is not None and node.work_dir is not None
        started = time.monotonic()
        env = dict(spec.env)
        if spec.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        node.existing_jobs.discard(spec.job_id)
        node.running.add(spec.job_id)
        done = False
        try:
            for _ in range(2):  # a second round when the node lost blobs we thought it had
                shas = await node.blobs.ensure(spec.files)
                execs = set(spec.executable)
                links = [(sha, rel, rel in execs) for rel, sha in shas.items()]
                script = run_script(
                    node.work_dir,
                    spec.job_id,
                    links,
                    spec.argv,
                    env,
                    node.cfg.setup,
                    spec.timeout_s,
                    self.cluster.kill_grace_s,
                    spec.outputs,
                    gpus=spec.gpus > 0,
                )
                limit = spec.timeout_s + self.cluster.kill_grace_s + SETUP_ALLOWANCE_S
                try:
                    res = await node.pool.run(script, timeout=limit, binary=True)
                except TimeoutError:
                    await asyncio.shield(self._quiet(node.kill_job(spec.job_id, remove=not self.keep_job_dirs)))
                    done = True
                    return JobResult(
                        spec.job_id,
                        JobStatus.TIMEOUT,
                        node=node.name,
                        gpus=gpus,
                        duration_s=time.monotonic() - started,
                        error=f"no answer from the node {limit:g} s after start; job killed",
                    )
                if res.exit_status == EXIT_MISSING_BLOBS:
                    err = out_text(res.stderr)
                    node.blobs.forget(err.split(MISSING_MARK, 1)[-1].split())
                    continue
                break
            else:
                raise BlobUploadError(f"{node.name}: blobs vanish from {node.work_dir}/blobs after upload")
            done = True
            result = self._parse(node, spec, gpus, res, started)
            if not self.keep_job_dirs and result.status is not JobStatus.ERROR:
                node.remove_later(spec.job_id)
            return result
        finally:
            node.running.discard(spec.job_id)
            if not done and not self._closing:
                # Cancelled (or the link failed): kill the remote group even while being cancelled.
                await asyncio.shield(self._quiet(node.kill_job(spec.job_id, remove=not self.keep_job_dirs)))

    def _parse(self, node: RemoteNode, spec: JobSpec, gpus: tuple[int, ...], res, started: float) -> JobResult:
        # every result names the job, its node, its GPUs and its duration
        result = functools.partial(
            JobResult, spec.job_id, node=node.name, gpus=gpus, duration_s=time.monotonic() - started
        )
        if res.exit_status not in (0, None):
            err = out_text(res.stderr).strip()
            return result(
                JobStatus.ERROR, error=f"the job wrapper failed on {node.name} (exit {res.exit_status}): {err}"
            )
        try:
            members = read_result(res.stdout or b"")
        except tarfile.TarError as exc:
            return result(JobStatus.ERROR, error=f"unreadable result from {node.name}: {exc}")
        log = tail_text(members.get("logtail", b""))
        outputs = {rel: members[f"work/{rel}"] for rel in spec.outputs if f"work/{rel}" in members}
        rc_text = members.get("rc", b"").decode().strip()
        if not rc_text.lstrip("-").isdigit():
            return result(
                JobStatus.LOST,
                log=log,
                outputs=outputs,
                error=f"the job ended on {node.name} without an exit code (killed there?)",
            )
        rc = int(rc_text)
        if "timedout" in members:
            return result(
                JobStatus.TIMEOUT, rc=rc, log=log, outputs=outputs, error=f"timed out after {spec.timeout_s:g} s"
            )
        return result(JobStatus.OK, rc=rc, log=log, outputs=outputs)
