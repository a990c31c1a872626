"""A job that did not exit 0 is never correct, whatever its result.json says (engine/evaluation/evaluation.py).

A judge that crashed after a candidate put a result in place (or a harness killed after writing its own)
leaves a file that may carry the nonce and say correct; the job's exit status is the launcher's word that
the harness finished. The executor here is the synthetic one (a harness-shaped result with the job's real
nonce), with the job's exit status set as a crashed judge's would be: what is under test is the engine's
reading of a job, not a harness.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from engine.evaluation.evaluation import evaluate_source
from engine.workload import load_workload
from remote.jobs import JobResult, JobSpec
from tests.engine.synthetic import SyntheticExecutor


class ExitsWith(SyntheticExecutor):
    """Every run job ends with `rc` after writing a correct result carrying its nonce."""

    def __init__(self, rc: int) -> None:
        super().__init__(judge=lambda source: (True, 1.5))
        self.rc = rc

    async def run(self, spec: JobSpec) -> JobResult:
        job = await super().run(spec)
        return job if spec.kind == "build" else dataclasses.replace(job, rc=self.rc)


@pytest.mark.parametrize("rc", [139, 3, 1])
def test_a_correct_result_from_a_job_that_failed_is_not_believed(rc):
    workload = load_workload("demo")
    assert workload.harness_nonce
    out = asyncio.run(evaluate_source(workload, workload.seed_source, ExitsWith(rc), job_prefix="x", seed=3))
    assert out.status == "failed" and out.speedup is None, (out.status, out.reason)
    assert f"exited with status {rc}" in out.reason and "not believed" in out.reason, out.reason


def test_the_same_result_from_a_job_that_exited_0_is():
    workload = load_workload("demo")
    out = asyncio.run(evaluate_source(workload, workload.seed_source, ExitsWith(0), job_prefix="x", seed=3))
    assert out.status == "done" and out.speedup == pytest.approx(1.5), (out.status, out.reason)
