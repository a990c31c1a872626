"""Whose fault: real jobs run by the local executor, classified by engine/evaluation/faults.py, and the policy's
answer to a candidate that tries to pass its own failure off as the environment's."""

from __future__ import annotations

import asyncio
import errno
import sqlite3

import pytest

from engine.evaluation import fault_policy, faults
from engine.evaluation.evaluation import EvalOutcome
from remote.jobs import JobResult, JobSpec, JobStatus, NoUsableNode
from remote.local import LocalExecutor


async def run(script: str, tmp_path, timeout_s: float = 10.0):
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=2, gpus=[])
    try:
        return await ex.run(JobSpec(job_id="j", argv=["sh", "-c", script], timeout_s=timeout_s))
    finally:
        await ex.close()


@pytest.mark.parametrize(
    "stage,script,owner,kind",
    [
        ("build", "echo 'a.cpp:3:1: error: expected ;' >&2; exit 1", faults.CANDIDATE, "failed"),
        ("verify", "exit 3", faults.CANDIDATE, "failed"),
        ("verify", "kill -SEGV $$", faults.CANDIDATE, "failed"),
        ("verify", "sleep 5", faults.CANDIDATE, "timeout"),
        # what a job prints is never the environment's word: the candidate writes part of every log
        (
            "build",
            "echo '/usr/bin/ld: final link failed: No space left on device' >&2; exit 1",
            faults.CANDIDATE,
            "failed",
        ),
        ("verify", "echo 'No space left on device' >&2; kill -SEGV $$", faults.CANDIDATE, "failed"),
        ("benchmark", f"exit {faults.NO_SPACE_EXIT}", faults.ENVIRONMENT, faults.NO_SPACE),
        ("build", "exit 1", faults.ENVIRONMENT, faults.NO_SPACE),  # not a word: its log could not be written
        ("build", "no-such-compiler-here -c a.cpp", faults.ENVIRONMENT, faults.TOOLCHAIN),
        ("build", "kill -KILL $$", faults.ENVIRONMENT, faults.TOOLCHAIN),
        ("benchmark", "kill -KILL $$", faults.ENVIRONMENT, faults.HOST_OOM),
        (
            "verify",
            "echo 'CUDA error: uncorrectable ECC error encountered' >&2; exit 1",
            faults.CANDIDATE,
            "failed",
        ),
    ],
)
def test_job_outcomes_are_classified(tmp_path, stage, script, owner, kind):
    job = asyncio.run(run(script, tmp_path, timeout_s=1.0))
    fault = faults.of_job(stage, job)
    assert fault is not None and (fault.owner, fault.kind) == (owner, kind), (job, fault)


@pytest.mark.parametrize(
    "job,kind",
    [
        (
            JobResult(
                "j", JobStatus.LOST, node="n1", error="gave up after 3 attempts: Slurm job 41 ended with PREEMPTED"
            ),
            faults.SCHEDULER,
        ),
        (JobResult("j", JobStatus.LOST, error="Slurm job 42 was cancelled outside cuco (CANCELLED)"), faults.SCHEDULER),
        (
            JobResult("j", JobStatus.LOST, node="a", error="a: command ended without an exit status (channel closed)"),
            faults.NODE_LOST,
        ),
        (JobResult("j", JobStatus.LOST, error="no usable node (a: quarantined for 600 s)"), faults.NO_NODE),
        (
            JobResult("j", JobStatus.ERROR, error="Slurm job 43 ended OUT_OF_MEMORY without an exit code"),
            faults.HOST_OOM,
        ),
    ],
)
def test_executor_reports_are_the_environments(job, kind):
    """What the SSH and Slurm executors report for a job they lost (the words their code writes)."""
    fault = faults.of_job("benchmark", job)
    assert fault.environment and fault.kind == kind, fault


def test_a_clean_job_has_no_fault(tmp_path):
    assert faults.of_job("verify", asyncio.run(run("true", tmp_path))) is None


@pytest.mark.parametrize(
    "exc,kind",
    [
        (OSError(errno.ENOSPC, "No space left on device"), faults.NO_SPACE),
        (sqlite3.OperationalError("database or disk is full"), faults.NO_SPACE),
        (sqlite3.OperationalError("attempt to write a readonly database"), faults.STORE),
        (NoUsableNode("no node of c.yaml can be used"), faults.NO_NODE),
        (ConnectionResetError("reset by peer"), faults.NODE_LOST),
    ],
)
def test_exceptions_are_the_environments(exc, kind):
    fault = faults.of_exception(exc)
    assert fault.environment and fault.kind == kind


def test_a_sqlite_bug_is_not_taken_for_the_disk():
    assert not faults.is_environment_error(sqlite3.IntegrityError("UNIQUE constraint failed: runs.id"))


def _faulty(kind: str) -> EvalOutcome:
    fault = faults.environment(kind, f"verify: {kind}")
    return EvalOutcome("failed", reason=fault.reason, fault=fault)


def test_an_environment_fault_only_one_candidate_meets_is_its_own():
    """A candidate printing 'No space left on device' while others evaluate cleanly: bounded retries, then
    recorded failed as its own, and the run is not paused."""
    policy = fault_policy.FaultPolicy(base_delay_s=0.0)
    decisions = []

    async def cheat(n: int) -> EvalOutcome:
        policy.clean(candidate_id=99)  # another candidate evaluated cleanly meanwhile
        return _faulty(faults.NO_SPACE)

    async def note(_outcome, decision):
        decisions.append(decision.action)

    out = asyncio.run(fault_policy.evaluate_with_retries(policy, 7, cheat, note))
    assert out is not None and out.status == "failed" and out.fault.owner == faults.CANDIDATE
    assert "counted as its own" in out.reason
    assert decisions[-1] == fault_policy.BLAME and fault_policy.PAUSE not in decisions


def test_a_persistent_fault_pauses_the_run():
    policy = fault_policy.FaultPolicy(base_delay_s=0.0)
    decisions = []

    async def full(n: int) -> EvalOutcome:
        return _faulty(faults.NO_SPACE)

    async def note(_outcome, decision):
        decisions.append(decision)

    assert asyncio.run(fault_policy.evaluate_with_retries(policy, 1, full, note)) is None  # the candidate waits
    assert [d.action for d in decisions] == [fault_policy.RETRY, fault_policy.PAUSE]
    assert "cuco resume" in decisions[-1].reason and "free space" in decisions[-1].reason


def test_a_transient_fault_is_retried_then_the_verdict_is_recorded():
    policy = fault_policy.FaultPolicy(base_delay_s=0.0)

    async def flaky(n: int) -> EvalOutcome:
        return _faulty(faults.NODE_LOST) if n == 0 else EvalOutcome("done", speedup=1.2)

    async def note(_outcome, _decision):
        pass

    out = asyncio.run(fault_policy.evaluate_with_retries(policy, 1, flaky, note))
    assert out is not None and out.status == "done"
