"""The L2-flush benchmark (tests/bench/l2_flush/stencil_after_flush.cu) keeps compiling; it runs on a GPU
(docs/measurements/gpu-workloads.md, "What the harness's L2 flush costs a memory-bound iteration")."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.test_cuda_workloads import NVCC, needs_nvcc

SOURCE = Path(__file__).resolve().parents[1] / "tests" / "bench" / "l2_flush" / "stencil_after_flush.cu"


@needs_nvcc
def test_l2_flush_bench_compiles(tmp_path):
    binary = tmp_path / "stencil_after_flush"
    r = subprocess.run(
        [NVCC, "-O3", "-std=c++17", "-arch=sm_90", str(SOURCE), "-o", str(binary)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert binary.stat().st_size > 0
