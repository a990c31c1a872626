"""The out-of-process cross-check: the harness's timed calls, added up, must fit in the wall time the
launching process measured for the job. A harness whose clock runs fast (built here with
CUCO_CLOCK_SCALE, the stand-in for a clock a candidate managed to speed up) is not believed; the same
harness with a true clock is."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import pytest

from engine.evaluation.evaluation import evaluate_source
from engine.workload import load_workload
from remote.local import LocalExecutor

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the harness is compiled")


def evaluate(workload, tmp_path):
    async def main():
        executor = LocalExecutor(work_dir=tmp_path)
        try:
            return await asyncio.wait_for(
                evaluate_source(workload, workload.seed_source, executor, job_prefix="clock", seed=5), 240
            )
        finally:
            await executor.close()

    return asyncio.run(main())


def test_a_harness_clock_that_runs_fast_is_caught_by_the_launchers_wall_time(tmp_path):
    demo = load_workload("demo")
    fast_clock = dataclasses.replace(
        demo,
        warmup=1,
        iters=3,
        cache_frozen=False,
        build_command=demo.build_command.replace("g++", "g++ -DCUCO_CLOCK_SCALE=10", 1),
    )
    out = evaluate(fast_clock, tmp_path / "fast")
    assert out.status == "failed", (out.status, out.reason)
    assert "more than the" in out.reason and "measured by the launching process" in out.reason
    assert out.speedup is None

    honest = evaluate(dataclasses.replace(demo, warmup=1, iters=3), tmp_path / "true")
    assert honest.status == "done", honest.reason
    timed = honest.metrics["benchmark"]["timed_ms"]
    bench = [s for s in honest.stages if s.stage == "benchmark"][0]
    assert 0 < timed <= bench.duration_s * 1000
