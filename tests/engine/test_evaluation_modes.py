"""The cascade's shorter modes and its one job builder, as `cuco validate` and `cuco profile` use them (real
g++ builds of the demo, real subprocesses): a verify-only evaluation stops before the benchmark and still
judges the result; a harness run of a subset of configs under a wrapper script is the same harness run."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.evaluation.evaluation import VERIFIED, build_stage, evaluate_source, fresh_seed, read_result, run_job
from engine.stages import BUILD, VERIFY
from engine.workload import load_workload
from remote.local import LocalExecutor

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the demo is compiled")

ROOT = Path(__file__).resolve().parents[2]
SEND = "p->put(p->link, rank, peer, 0, rank * N, p->M, N, p->scratch, N, 0);"


@pytest.fixture(scope="module")
def demo():
    return load_workload(str(ROOT / "workloads" / "demo"))


def _broken(seed: str) -> str:
    """The seed that sends nothing: it builds, runs and is wrong on every config."""
    assert seed.count(SEND) == 1
    return seed.replace(SEND, "(void)peer;")


def test_verify_only_stops_before_the_benchmark_and_judges_the_result(demo, tmp_path):
    async def main():
        executor = LocalExecutor(work_dir=tmp_path / "jobs")
        try:
            good, bad = await asyncio.gather(
                evaluate_source(demo, demo.seed_source, executor, job_prefix="v-good", seed=fresh_seed(), upto=VERIFY),
                evaluate_source(
                    demo, _broken(demo.seed_source), executor, job_prefix="v-bad", seed=fresh_seed(), upto=VERIFY
                ),
            )
        finally:
            await executor.close()
        return good, bad

    good, bad = asyncio.run(main())
    assert good.status == VERIFIED, good.reason
    assert [s.stage for s in good.stages] == [BUILD, VERIFY] and list(good.metrics) == [VERIFY]
    assert good.speedup is None and good.correct is None  # not measured, so never counted
    assert bad.status == "incorrect" and [s.stage for s in bad.stages] == [BUILD, VERIFY]


def test_a_subset_of_configs_under_a_wrapper_is_the_same_harness_run(demo, tmp_path):
    """The profiler's job: one config, the launch command run by a wrapper ("$@"), the nonce still checked."""
    one = demo.configs[-1]
    wrapper = 'echo wrapped > wrapper.txt; "$@"'

    async def main():
        executor = LocalExecutor(work_dir=tmp_path / "jobs")
        try:
            built = await build_stage(demo, demo.seed_source, executor, job_prefix="w")
            assert built.binary is not None, built.outcome
            nonce = "n" * 32
            job = await executor.run(
                run_job(
                    demo,
                    built.binary,
                    VERIFY,
                    fresh_seed(),
                    "w-run",
                    nonce,
                    configs=[one],
                    wrapper=wrapper,
                    outputs=("wrapper.txt",),
                )
            )
            return job, nonce
        finally:
            await executor.close()

    job, nonce = asyncio.run(main())
    assert job.ok, job.log
    assert job.outputs["wrapper.txt"] == b"wrapped\n"
    result = read_result(job, VERIFY, [one.name], nonce)
    assert result.correct and [c["name"] for c in result.raw["configs"]] == [one.name]


def test_validate_reports_a_seed_that_does_not_verify(demo, demo_copy, tmp_path):
    (demo_copy / demo.candidate_file).write_text(_broken(demo.seed_source))
    proc = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "validate", str(demo_copy)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "compiled seed" in proc.stdout and "seed does not verify" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / ".cuco").exists()  # validating leaves no project home behind
