"""The CUDA harness's host collectives (cuco_abi.h: cuco_host_allreduce, reduce, bcast, barrier), with no
GPU: the harness built as a job builds it, then `--self-test-host-comm R` takes the launcher's path (the
shared memory made before the fork, R rank processes exec'd) and every rank checks every collective's
result (sums, maxima, minima of int, long long, float, double over several chunks; in place; a reduce to
one root; a 20,000-byte broadcast; bad arguments refused), a rank that never arrives fails its peers'
call within the bound with the late rank named, and rank 0 prints the per-call cost.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.test_cuda_workloads import NCCL, NVCC, WORKLOADS, needs_nvcc


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    w = WORKLOADS[0]
    job = tmp_path_factory.mktemp("host_comm")
    spec = yaml.safe_load((w / "workload.yaml").read_text())
    for p in spec["harness"]["sources"] + spec["harness"]["headers"] + [spec["candidate"]]:
        shutil.copy(w / p, job / Path(p).name)
    names = [Path(p).name for p in spec["harness"]["sources"]] + [spec["candidate"]]
    r = subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", "-O3", f"-I{NCCL}/include", *names, "-o", "bench"]
        + [f"-L{NCCL}/lib", "-l:libnccl.so.2", "-Xlinker", f"-rpath,{NCCL}/lib"],
        cwd=job,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return job / "bench"


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_every_rank_gets_the_collectives_results(bench, ranks):
    r = subprocess.run([str(bench), "--self-test-host-comm", str(ranks)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"host-comm ranks={ranks} passed" in r.stdout
    cost = re.search(r"allreduce_us=([\d.]+) bcast_us=([\d.]+)", r.stdout)
    assert cost is not None, r.stdout
    if ranks > 1:
        # the last rank skipped its call: rank 0's failed within the bound (0.3 s here), naming it
        assert f"rank {ranks - 1} did not arrive within 0.3 s" in r.stdout


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_rank_without_the_shared_memory_says_so(bench):
    """The self-test can fail: a rank given no shared memory (no descriptor) names why and exits non-zero."""
    r = subprocess.run(
        [str(bench), "--host-comm-test-rank", "0", "--ranks", "2", "--host-comm", "-1,-1,-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert "could not create its shared memory" in r.stderr
