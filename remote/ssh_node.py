"""One remote node as the SSH executor sees it: its connection pool, slot table, blob cache, health."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time

from .blobs import BlobCache
from .cluster import NodeConfig, QuarantinePolicy
from .hostkeys import HostKeyRefused
from .jobs import NodeState
from .remote_job import init_script, kill_script, remove_script
from .slots import SlotTable
from .ssh_connect import SSHContext, connect_node
from .ssh_pool import NodeDown, SSHPool, out_text

INIT_TIMEOUT_S = 60.0


class RemoteNode:
    def __init__(self, cfg: NodeConfig, ctx: SSHContext, quarantine: QuarantinePolicy, kill_grace_s: float):
        self.cfg = cfg
        self.name = cfg.name
        self.quarantine = quarantine
        self.kill_grace_s = kill_grace_s
        self.pool = SSHPool(
            cfg.name,
            lambda: connect_node(cfg, ctx),
            max_connections=cfg.max_connections,
            acquire_timeout_s=ctx.connect_timeout_s * 2 + 10,
        )
        self.slots: SlotTable | None = None
        self.work_dir: str | None = None  # absolute, once initialised
        self.blobs: BlobCache | None = None
        self.existing_jobs: set[str] = set()  # job dirs found on the node when it was first reached
        self.running: set[str] = set()
        self.orphans: set[str] = set()  # jobs lost with a connection: kill them when it comes back
        self.assigned_cpus = 0  # CPU slots of jobs routed here (running or waiting)
        self.assigned_gpus = 0
        self.failures_total = 0
        self._recent_failures: collections.deque[float] = collections.deque()
        self.quarantined_until = 0.0
        self.host_key_error = ""
        self._init_lock = asyncio.Lock()
        self._to_remove: list[str] = []
        self._remover: asyncio.Task | None = None

    # ---- health -------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.slots is not None

    def quarantined(self, now: float | None = None) -> bool:
        return (now or time.monotonic()) < self.quarantined_until

    def usable(self) -> bool:
        return not self.quarantined() and not self.pool.in_backoff() and not self.host_key_error

    def record_failure(self, why: str) -> None:
        now = time.monotonic()
        self.failures_total += 1
        self.pool.last_error = why
        q = self._recent_failures
        q.append(now)
        while q and now - q[0] > self.quarantine.window_s:
            q.popleft()
        if len(q) >= self.quarantine.failures:
            self.quarantined_until = now + (self.quarantine.duration_s or math.inf)
            q.clear()

    def state(self) -> NodeState:
        s = self.slots
        quarantined = self.quarantined()
        detail = ""
        if quarantined:
            left = self.quarantined_until - time.monotonic()
            detail = (
                "quarantined"
                + ("" if math.isinf(left) else f" for {left:.0f} s")
                + (f": {self.pool.last_error}" if self.pool.last_error else "")
            )
        elif self.host_key_error:
            detail = self.host_key_error
        elif self.pool.in_backoff() or not self.ready:
            detail = self.pool.last_error or "not connected yet"
        return NodeState(
            name=self.name,
            healthy=self.ready and self.usable(),
            quarantined=quarantined,
            gpus_total=len(s.gpu_ids) if s else 0,
            gpus_busy=s.gpus_busy if s else 0,
            cpu_slots=s.cpu_slots if s else 0,
            cpu_busy=s.cpu_busy if s else 0,
            running_jobs=len(self.running),
            failures=self.failures_total,
            detail=detail,
        )

    def load(self, gpus: int, cpus: int) -> float:
        """How busy the node is for a job of this shape (lower is better)."""
        assert self.slots is not None
        if gpus:
            return (self.assigned_gpus + gpus) / max(len(self.slots.gpu_ids), 1)
        return (self.assigned_cpus + cpus) / self.slots.cpu_slots

    # ---- setup --------------------------------------------------------------------------------
    async def ensure_ready(self) -> None:
        """Connect, create the work dir, discover CPUs/GPUs, list blobs and leftover jobs (once)."""
        if self.ready:
            if self.orphans:
                await self._kill_orphans()
            return
        async with self._init_lock:
            if self.ready:
                return
            try:
                res = await self.pool.run(
                    init_script(self.cfg.work_dir, self.cfg.gpus is None, self.cfg.cpu_slots is None),
                    timeout=INIT_TIMEOUT_S,
                )
            except HostKeyRefused as exc:
                self.host_key_error = str(exc)
                raise
            except TimeoutError:
                self.pool.mark_down("timed out preparing the work dir")
                raise NodeDown(f"{self.name}: timed out preparing the work dir") from None
            if res.exit_status != 0:
                why = f"cannot create work dir {self.cfg.work_dir}: {out_text(res.stderr).strip()}"
                self.pool.mark_down(why)
                raise NodeDown(f"{self.name}: {why}")
            work_dir, cpus, gpus, blobs, jobs = None, None, [], [], []
            for line in out_text(res.stdout).splitlines():
                tag, _, val = line.partition(" ")
                if tag == "WORKDIR":
                    work_dir = val.strip()
                elif tag == "CPUS" and val.strip().isdigit():
                    cpus = int(val)
                elif tag == "GPU" and val.strip().isdigit():
                    gpus.append(int(val))
                elif tag == "BLOB":
                    blobs.append(val.strip())
                elif tag == "JOB":
                    jobs.append(val.strip())
            if not work_dir:
                raise NodeDown(f"{self.name}: the work dir setup printed nothing")
            self.work_dir = work_dir
            self.blobs = BlobCache(self.pool, work_dir, blobs)
            self.existing_jobs = set(jobs)
            self.slots = SlotTable(
                self.cfg.cpu_slots or cpus or 1, list(self.cfg.gpus) if self.cfg.gpus is not None else gpus
            )

    async def _kill_orphans(self) -> None:
        for job_id in list(self.orphans):
            if job_id in self.running:
                self.orphans.discard(job_id)
                continue
            await self.kill_job(job_id)
            self.orphans.discard(job_id)

    # ---- job helpers --------------------------------------------------------------------------
    async def kill_job(self, job_id: str, remove: bool = True) -> bool:
        """TERM then KILL the job's process group; True when it was still running."""
        assert self.work_dir is not None
        res = await self.pool.run(
            kill_script(self.work_dir, job_id, self.kill_grace_s, remove=remove), timeout=self.kill_grace_s + 20
        )
        return "KILLED" in out_text(res.stdout)

    def remove_later(self, job_id: str) -> None:
        """Delete a collected job's directory soon (batched; the result is already in hand)."""
        self._to_remove.append(job_id)
        if self._remover is None or self._remover.done():
            self._remover = asyncio.get_running_loop().create_task(self._remove_batch())

    async def _remove_batch(self) -> None:
        await asyncio.sleep(0.2)
        while self._to_remove and self.work_dir:
            batch, self._to_remove = self._to_remove[:200], self._to_remove[200:]
            with contextlib.suppress(Exception):
                await self.pool.run(remove_script(self.work_dir, batch), timeout=30)

    async def flush_removals(self) -> None:
        if self._remover is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._remover), 30)
