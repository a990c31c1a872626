"""The embedded local executor (remote/local.py) and slot leases (remote/slots.py): real subprocesses."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

import pytest

from engine.stages import run_jobs_pattern
from remote.jobs import JobSpec, JobStatus
from remote.local import LocalExecutor
from remote.slots import SlotTable


def live_processes_under(root: Path) -> list[tuple[int, str]]:
    """Processes (not zombies) whose working directory lies under `root`, with their command line."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                continue
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if cwd.startswith(str(root)):
            found.append((int(entry), cmd))
    return found


async def gone(root: Path, within: float = 3.0) -> list[tuple[int, str]]:
    """What is still alive under `root` after giving SIGKILL `within` seconds to land."""
    left = live_processes_under(root)
    deadline = asyncio.get_running_loop().time() + within
    while left and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        left = live_processes_under(root)
    return left


# Two background sleeps (one ignoring SIGTERM), then a marker, then wait forever.
SPAWNER = "sleep 300 & (trap '' TERM; exec sleep 301) & sleep 0.2; echo started > started; echo spawned; wait"


@pytest.fixture
async def executor(tmp_path: Path):
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=2, gpus=[], keep_job_dirs=True)
    try:
        yield ex
    finally:
        await ex.close()


async def test_outputs_come_back(executor: LocalExecutor):
    spec = JobSpec(
        job_id="io",
        argv=["sh", "-c", "./tool.sh"],
        files={
            "tool.sh": b"#!/bin/sh\ncat in/data.txt | tr a-z A-Z > out.txt\n"
            b"mkdir -p res && printf '\\001\\002' > res/bin\n"
            b'echo "env=$CUCO_TEST_VAR"\necho to-stderr >&2\n',
            "in/data.txt": b"hello\n",
        },
        executable=["tool.sh"],
        outputs=["out.txt", "res/bin", "never-written.txt"],
        env={"CUCO_TEST_VAR": "xyz"},
        timeout_s=30,
    )
    res = await executor.run(spec)
    assert res.status is JobStatus.OK and res.rc == 0 and res.ok
    assert res.outputs == {"out.txt": b"HELLO\n", "res/bin": b"\x01\x02"}  # missing outputs are absent
    assert "env=xyz" in res.log and "to-stderr" in res.log
    assert res.node == "local" and res.duration_s > 0


async def test_nonzero_exit_is_reported(executor: LocalExecutor):
    res = await executor.run(JobSpec(job_id="rc", argv=["sh", "-c", "echo oops; exit 7"], timeout_s=30))
    assert res.status is JobStatus.OK and res.rc == 7 and not res.ok
    assert "oops" in res.log


async def test_missing_program_is_an_error_not_a_crash(executor: LocalExecutor):
    res = await executor.run(JobSpec(job_id="nope", argv=["/nonexistent/cuco-tool"], timeout_s=30))
    assert res.status is JobStatus.ERROR and "cuco-tool" in res.error
    assert executor.slots.cpu_busy == 0


async def test_timeout_kills_the_whole_process_group(executor: LocalExecutor, tmp_path: Path):
    started = asyncio.get_running_loop().time()
    res = await executor.run(JobSpec(job_id="slow", argv=["sh", "-c", SPAWNER], timeout_s=1.0))
    assert asyncio.get_running_loop().time() - started < 10
    assert res.status is JobStatus.TIMEOUT and not res.ok
    assert "timed out" in res.error
    assert "spawned" in res.log
    (job_dir,) = (tmp_path / "jobs").glob("slow-*")
    assert (job_dir / "started").is_file()  # the sleeps really were started
    assert await gone(job_dir) == []
    assert executor.slots.cpu_busy == 0


async def test_stragglers_of_a_finished_job_die_with_it(executor: LocalExecutor, tmp_path: Path):
    res = await executor.run(JobSpec(job_id="quick", argv=["sh", "-c", "sleep 300 & echo bye"], timeout_s=30))
    assert res.ok and "bye" in res.log
    (job_dir,) = (tmp_path / "jobs").glob("quick-*")
    assert await gone(job_dir) == []


async def test_cancelling_the_awaiting_task_kills_the_group(executor: LocalExecutor, tmp_path: Path):
    task = asyncio.create_task(executor.run(JobSpec(job_id="cancel", argv=["sh", "-c", SPAWNER], timeout_s=120)))
    marker = None
    for _ in range(200):
        marker = next((tmp_path / "jobs").glob("cancel-*/started"), None)
        if marker:
            break
        await asyncio.sleep(0.05)
    assert marker is not None, "the job never started"
    assert len(live_processes_under(marker.parent)) >= 3  # sh + two sleeps
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert await gone(marker.parent) == []
    assert executor.slots.cpu_busy == 0
    assert executor.nodes()[0].running_jobs == 0


async def test_close_kills_running_jobs(tmp_path: Path):
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=1, gpus=[], keep_job_dirs=True)
    task = asyncio.create_task(ex.run(JobSpec(job_id="orphan", argv=["sh", "-c", SPAWNER], timeout_s=120)))
    for _ in range(200):
        if next((tmp_path / "jobs").glob("orphan-*/started"), None):
            break
        await asyncio.sleep(0.05)
    await ex.close()
    res = await asyncio.wait_for(task, 10)
    assert res.rc != 0
    (job_dir,) = (tmp_path / "jobs").glob("orphan-*")
    assert await gone(job_dir) == []


async def test_reconcile_touches_only_its_own_runs_jobs(tmp_path: Path):
    """Two engines share a home's jobs folder. One whose engine died left a job running; the other's job is in
    flight (its run's name begins with the first's). Reconciling the first run kills and removes its own
    leftover only: the other run's job runs on and finishes."""
    dead = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=2, gpus=[])
    left = asyncio.create_task(dead.run(JobSpec(job_id="demo-1-c4-benchmark", argv=["sh", "-c", SPAWNER])))
    live = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=2, gpus=[])
    other = asyncio.create_task(
        live.run(
            JobSpec(job_id="demo-1-c7-c2-r1-build", argv=["sh", "-c", "sleep 1.5; echo mine > out"], outputs=["out"])
        )
    )
    for _ in range(200):
        if next((tmp_path / "jobs").glob("demo-1-c4-*/started"), None):
            break
        await asyncio.sleep(0.05)
    (orphan_dir,) = (tmp_path / "jobs").glob("demo-1-c4-*")
    restarted = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=2, gpus=[])
    try:
        killed = await restarted.reconcile(set(), run_jobs_pattern("demo-1"))
        assert [k.rsplit("-", 2)[0] for k in killed] == ["demo-1-c4-benchmark"]
        assert await gone(orphan_dir) == [] and not orphan_dir.exists()
        res = await asyncio.wait_for(other, 10)
        assert res.ok and res.outputs == {"out": b"mine\n"}, res
    finally:
        left.cancel()
        await asyncio.gather(left, return_exceptions=True)
        for ex in (dead, live, restarted):
            await ex.close()


# ----- slots -----------------------------------------------------------------------------------------

SPAN = 'date +%s.%N > start; printf %s "${{CUDA_VISIBLE_DEVICES:--}}" > cvd; sleep {hold}; date +%s.%N > end'


def span_job(job_id: str, gpus: int = 0, cpus: int = 1, hold: float = 0.3) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        argv=["sh", "-c", SPAN.format(hold=hold)],
        outputs=["start", "end", "cvd"],
        gpus=gpus,
        cpus=cpus,
        timeout_s=60,
    )


def span(res) -> tuple[float, float]:
    assert res.ok, res.log
    return float(res.outputs["start"]), float(res.outputs["end"])


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


async def test_two_gpu_leases_never_overlap(tmp_path: Path):
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=2, gpus=[0, 1, 2, 3])
    try:
        results = await asyncio.gather(*(ex.run(span_job(f"g{i}", gpus=2)) for i in range(6)))
    finally:
        await ex.close()
    jobs = []
    for res in results:
        devices = [int(x) for x in res.outputs["cvd"].decode().split(",")]
        assert len(devices) == 2 and len(set(devices)) == 2 and set(devices) <= {0, 1, 2, 3}
        assert tuple(devices) == res.gpus
        jobs.append((set(devices), span(res)))
    for (ga, sa), (gb, sb) in itertools.combinations(jobs, 2):
        if ga & gb:
            assert not overlaps(sa, sb), f"GPUs {ga & gb} held by two jobs at once: {sa} {sb}"
    # The 4 GPUs were used by two jobs side by side (leases are not simply serialised).
    assert any(overlaps(sa, sb) for (_, sa), (_, sb) in itertools.combinations(jobs, 2))
    assert ex.slots.gpus_busy == 0


async def test_cpu_jobs_holding_both_slots_run_alone(tmp_path: Path):
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=2, gpus=[])
    try:
        specs = [span_job(f"wide{i}", cpus=2, hold=0.2) for i in range(3)] + [
            span_job(f"narrow{i}", cpus=1, hold=0.3) for i in range(4)
        ]
        results = await asyncio.gather(*(ex.run(s) for s in specs))
    finally:
        await ex.close()
    spans = [(s.cpus, span(r)) for s, r in zip(specs, results)]
    for (ca, sa), (cb, sb) in itertools.combinations(spans, 2):
        if ca == 2 or cb == 2:
            assert not overlaps(sa, sb), "a job holding both CPU slots shared the node"
    narrow = [s for c, s in spans if c == 1]
    assert any(overlaps(a, b) for a, b in itertools.combinations(narrow, 2))  # two 1-slot jobs side by side
    assert ex.slots.cpu_busy == 0


async def test_slot_table_rejects_impossible_and_releases_on_cancel():
    table = SlotTable(cpu_slots=1, gpu_ids=[0, 1])
    with pytest.raises(ValueError, match="3 GPUs"):
        async with table.lease(gpus=3):
            pass
    async with table.lease(gpus=2) as held:
        assert held == (0, 1) and table.gpus_busy == 2
        waiter = asyncio.create_task(table.lease(gpus=1).__aenter__())
        await asyncio.sleep(0.05)
        assert not waiter.done()  # no partial lease while both GPUs are held
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert table.gpus_busy == 0
    # cpus above the node's slots are capped, not deadlocked.
    async with asyncio.timeout(5):
        async with table.lease(cpus=8):
            assert table.cpu_busy == 1
    assert table.cpu_busy == 0
