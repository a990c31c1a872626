"""The Slurm executor against a real single-node Slurm: submission, results, GPUs, cancel, jobs Slurm
kills, re-adoption by a second executor, refused partitions."""

from __future__ import annotations

import asyncio
import time

import pytest
import slurm_cluster

from remote.errors import InputError
from remote.jobs import JobSpec, JobStatus
from remote.registry import executor_from_file


async def started(path, home):
    ex = executor_from_file(path, home)
    await asyncio.wait_for(ex.start(), 60)
    return ex


async def test_job_runs_through_slurm_with_files_outputs_and_gpus(slurm_yaml, tmp_path):
    ex = await started(slurm_yaml(), tmp_path / ".cuco")
    try:
        assert ex.max_gpus_per_job == 4  # from sinfo: the node's GPU GRES
        spec = JobSpec(
            "t1-run",
            ["sh", "-c", "cat in.txt > out.txt; echo gpus=$CUDA_VISIBLE_DEVICES; exit 3"],
            files={"in.txt": b"hello"},
            outputs=["out.txt"],
            gpus=2,
            timeout_s=30,
        )
        res = await asyncio.wait_for(ex.run(spec), 60)
        assert res.status is JobStatus.OK and res.rc == 3, res
        assert res.outputs == {"out.txt": b"hello"}
        assert "gpus=0,1" in res.log  # Slurm allocated two GPUs and said which
        assert res.node.startswith("slurm:")
        assert ex.submissions == 1
    finally:
        await ex.close()


async def wait_for_state(slurm, name: str, state: str, timeout: float = 30) -> str:
    """The Slurm id of job `name` once squeue shows it in `state`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for sid, st, n in slurm.queue():
            if n == name and st == state:
                return sid
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} never reached {state}: {slurm.queue()}")


def submissions_named(slurm, name: str) -> int:
    """How many jobs of that name Slurm has seen (finished ones from jobcomp, plus those still queued)."""
    finished = sum(1 for j in slurm.finished_jobs() if j.get("Name") == name)
    return finished + sum(1 for _, _, n in slurm.queue() if n == name)


async def test_cancel_runs_scancel_and_leaves_nothing_queued(slurm_yaml, slurm, tmp_path):
    ex = await started(slurm_yaml(), tmp_path / ".cuco")
    try:
        task = asyncio.create_task(ex.run(JobSpec("t2-run", ["sleep", "300"], timeout_s=600)))
        await wait_for_state(slurm, "cuco.t2-run", "RUNNING")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not [j for j in slurm.queue() if j[2] == "cuco.t2-run"]
        assert not (tmp_path / "shared" / "jobs" / "t2-run").exists()
    finally:
        await ex.close()


def cancel_from_outside(slurm, slurm_id: str) -> None:
    slurm.cmd("scancel", slurm_id)  # an administrator (or preemption) takes the job away


def node_goes_down(slurm, slurm_id: str) -> None:
    """The node goes down under the job (Slurm ends it NODE_FAIL), then comes back."""
    slurm.cmd("scontrol", "update", f"nodename={slurm.node}", "state=down", "reason=cuco-test")
    try:
        deadline = time.monotonic() + 30
        state = ""
        while time.monotonic() < deadline and state != "NODE_FAIL":
            state = slurm.cmd("squeue", "-h", "-t", "all", "-j", slurm_id, "-o", "%T").strip()
            time.sleep(0.1)
        assert state == "NODE_FAIL", state
    finally:  # (ReturnToService=2 may have taken it back already)
        slurm.cmd("scontrol", "update", f"nodename={slurm.node}", "state=resume", check=False)
        slurm.wait_idle()


@pytest.mark.parametrize("take_away", [cancel_from_outside, node_goes_down])
async def test_a_job_the_cluster_takes_away_is_submitted_again(slurm_yaml, slurm, tmp_path, take_away):
    ex = await started(slurm_yaml(), tmp_path / ".cuco")
    name = f"t3-{take_away.__name__.replace('_', '-')}-run"
    try:
        task = asyncio.create_task(ex.run(JobSpec(name, ["sh", "-c", "sleep 2; echo done"], timeout_s=60)))
        first = await wait_for_state(slurm, f"cuco.{name}", "RUNNING")
        await asyncio.to_thread(take_away, slurm, first)
        res = await asyncio.wait_for(task, 90)
        assert res.status is JobStatus.OK and res.rc == 0 and "done" in res.log, res
        assert res.attempts == 2 and res.node != f"slurm:{first}"
        assert ex.failures == 1
    finally:
        await ex.close()


async def test_a_second_executor_adopts_the_job_the_first_submitted(slurm_yaml, slurm, tmp_path):
    path = slurm_yaml()
    spec = JobSpec("t4-run", ["sh", "-c", "sleep 2; echo adopted > out.txt"], outputs=["out.txt"], timeout_s=60)
    first = await started(path, tmp_path / ".cuco")
    task = asyncio.create_task(first.run(spec))
    await wait_for_state(slurm, "cuco.t4-run", "RUNNING")
    # The first engine dies without cancelling anything (no close()).
    task.cancel()
    first._closing = True  # noqa: SLF001 - as if the process were gone: its cancel hook must not scancel
    with pytest.raises(asyncio.CancelledError):
        await task
    second = await started(path, tmp_path / ".cuco")
    try:
        assert await second.reconcile({"t4-run"}, "t4-.*") == []
        res = await asyncio.wait_for(second.run(spec), 60)
        assert res.ok and res.outputs == {"out.txt": b"adopted\n"}, res
        assert second.submissions == 0  # adopted, not submitted again
        assert submissions_named(slurm, "cuco.t4-run") == 1
    finally:
        await second.close()
        await first.close()


async def test_reconcile_cancels_jobs_the_engine_no_longer_wants(slurm_yaml, slurm, tmp_path):
    path = slurm_yaml()
    first = await started(path, tmp_path / ".cuco")
    task = asyncio.create_task(first.run(JobSpec("t5-run", ["sleep", "300"], timeout_s=600)))
    await wait_for_state(slurm, "cuco.t5-run", "RUNNING")
    first._closing = True  # noqa: SLF001 - gone without cancelling
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    second = await started(path, tmp_path / ".cuco")
    try:
        assert await second.reconcile(set(), "t5-.*") == ["t5-run"]
        assert not [j for j in slurm.queue() if j[2] == "cuco.t5-run"]
    finally:
        await second.close()
        await first.close()


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"partition": "nosuch"}, "partition"),
        ({"run": {"partition": "nosuch"}}, "run.partition"),
        ({"build": {"partition": "nosuch"}}, "build.partition"),
    ],
)
async def test_a_partition_slurm_does_not_know_is_an_input_error_naming_the_field(slurm_yaml, tmp_path, fields, field):
    ex = executor_from_file(slurm_yaml(**fields), tmp_path / ".cuco")
    try:
        with pytest.raises(InputError) as err:
            await asyncio.wait_for(ex.start(), 60)
        assert err.value.field == field and "nosuch" in err.value.message
    finally:
        await ex.close()


async def test_pending_reasons_reach_the_nodes_state(slurm_yaml, slurm, tmp_path):
    ex = await started(slurm_yaml(), tmp_path / ".cuco")
    try:
        # Two jobs that each want all 4 GPUs: the second waits for Resources.
        tasks = [
            asyncio.create_task(ex.run(JobSpec(f"t6-{i}-run", ["sleep", "3"], gpus=4, timeout_s=60))) for i in range(2)
        ]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "Resources" not in ex.nodes()[0].pending:
            await asyncio.sleep(0.1)
        state = ex.nodes()[0]
        assert state.pending.get("Resources") == 1, state
        assert sorted(state.queue.values()) == ["PENDING: Resources", "RUNNING"], state.queue
        assert "1 running, 1 pending (Resources: 1)" in state.detail
        results = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert all(r.ok for r in results), results
    finally:
        await ex.close()


async def test_builds_placed_on_the_login_node_run_there_without_slurm(slurm_yaml, slurm, tmp_path):
    ex = await started(slurm_yaml(build={"where": "login"}), tmp_path / ".cuco")
    try:
        build = JobSpec(
            "t7-build", ["sh", "-c", "echo built > out.txt"], outputs=["out.txt"], kind="build", timeout_s=30
        )
        res = await asyncio.wait_for(ex.run(build), 60)
        assert res.ok and res.outputs == {"out.txt": b"built\n"} and res.node == "login", res
        assert ex.submissions == 0 and submissions_named(slurm, "cuco.t7-build") == 0
        run = await asyncio.wait_for(ex.run(JobSpec("t7-run", ["true"], timeout_s=30)), 60)
        assert run.ok and run.node.startswith("slurm:") and ex.submissions == 1
    finally:
        await ex.close()


async def test_a_stage_timeout_ends_the_job_and_is_given_to_slurm(slurm_yaml, slurm, tmp_path):
    ex = await started(slurm_yaml(), tmp_path / ".cuco")
    try:
        task = asyncio.create_task(ex.run(JobSpec("t9-run", ["sleep", "60"], timeout_s=2)))
        sid = await wait_for_state(slurm, "cuco.t9-run", "RUNNING")
        # Slurm's own limit: the stage's timeout + kill grace + slack, in whole minutes (2 + 0.5 + 60 s -> 2)
        assert "TimeLimit=00:02:00" in slurm.cmd("scontrol", "show", "job", sid)
        res = await asyncio.wait_for(task, 60)
        assert res.status is JobStatus.TIMEOUT and "timed out after 2 s" in res.error, res
    finally:
        await ex.close()


async def abandoned(path, home, slurm, spec: JobSpec):
    """An executor that submits `spec` and dies with it running (no close(), no scancel)."""
    ex = await started(path, home)
    task = asyncio.create_task(ex.run(spec))
    await wait_for_state(slurm, f"cuco.{spec.job_id}", "RUNNING")
    ex._closing = True  # noqa: SLF001 - as if the process were gone: its cancel hook must not scancel
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return ex


async def test_a_job_whose_id_file_was_never_written_is_adopted_by_its_name(slurm_yaml, slurm, tmp_path):
    path = slurm_yaml()
    spec = JobSpec("t10-run", ["sh", "-c", "sleep 2; echo once >> ../../count"], timeout_s=60)
    first = await abandoned(path, tmp_path / ".cuco", slurm, spec)
    (tmp_path / "shared" / "jobs" / "t10-run" / "slurm_id").unlink()  # killed between sbatch and the write
    second = await started(path, tmp_path / ".cuco")
    try:
        res = await asyncio.wait_for(second.run(spec), 60)
        assert res.ok and second.submissions == 0, res
        assert submissions_named(slurm, "cuco.t10-run") == 1
    finally:
        await second.close()
        await first.close()


async def test_reconcile_leaves_the_jobs_of_another_work_dir_alone(slurm_yaml, slurm, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    first = await abandoned(
        slurm_cluster.write_cluster_yaml(tmp_path / "other.yaml", other),
        tmp_path / ".cuco-other",
        slurm,
        JobSpec("t11-run", ["sleep", "300"], timeout_s=600),
    )
    mine = await started(slurm_yaml(), tmp_path / ".cuco")
    try:
        assert await mine.reconcile(set(), "t[0-9]+-run") == []
        assert [j for j in slurm.queue() if j[2] == "cuco.t11-run"]  # another project's job runs on
    finally:
        await mine.close()
        first._closing = False  # noqa: SLF001
        assert await first.reconcile(set(), "t11-run") == ["t11-run"]
        await first.close()
