"""The one-GPU GEMM code-generation benchmark (tests/bench/bench_gemm_codegen.py), CPU side.

It guards what the hybrid variant's overlap efficiency rests on (its GEMM as fast as the baseline's), so it
must keep compiling against the shipped variant, and its --check must pass the recorded H200 result of the
current mainloop and fail the one recorded with the first (whose epilogue-dependent schedule cost the hybrid
2-5 %), a slow kernel and a wrong one. The run itself needs a GPU: tests/gpu/test_gemm_codegen_gpu.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_cuda_workloads import NCCL, NVCC, needs_nvcc

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "bench" / "bench_gemm_codegen.py"
RECORDED = ROOT / "tests" / "bench" / "gemm_codegen" / "h200_2026-11-24.json"  # current mainloop
FIRST_MAINLOOP = ROOT / "tests" / "bench" / "gemm_codegen" / "h200_2026-11-24_first_mainloop.json"
DEFAULT_LIMIT = 1.02


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_gemm_codegen", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_nvcc
def test_bench_compiles_against_the_shipped_hybrid_variant(tmp_path):
    binary = tmp_path / "bench"
    r = subprocess.run(
        [sys.executable, str(BENCH), "--build-only", "--binary", str(binary), "--nvcc", NVCC],
        env={**os.environ, "NCCL_HOME": NCCL},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert binary.stat().st_size > 0
    assert "cuda_13" in r.stderr  # the nvcc version is reported: the effect is the compiler's


def test_check_passes_the_recorded_h200_result_at_the_default_limit():
    bench = load_bench()
    result = json.loads(RECORDED.read_text())
    assert bench.problems(result, DEFAULT_LIMIT) == []
    table = bench.table(result)
    assert "8192x4096x8192" in table and "hybrid_old" in table
    assert f"default={DEFAULT_LIMIT}" in BENCH.read_text().replace(" ", "")  # the limit tested is the shipped one


def test_check_fails_the_first_mainloop_and_a_slow_hybrid_gemm_naming_the_shape():
    bench = load_bench()
    found = bench.problems(json.loads(FIRST_MAINLOOP.read_text()), DEFAULT_LIMIT)  # measured 1.021x there
    assert any("8192x4096x8192" in line and "hybrid" in line for line in found), found
    slow = json.loads(RECORDED.read_text())
    k = slow["shapes"][1]["kernels"]
    k["hybrid"] = dict(k["hybrid"], vs_plain=1.03)
    found = bench.problems(slow, DEFAULT_LIMIT)
    assert len(found) == 1 and "8192x4096x8192" in found[0] and "1.030x" in found[0], found


def test_check_fails_a_kernel_that_is_not_bit_exact_or_timed_out():
    bench = load_bench()
    bad = json.loads(RECORDED.read_text())
    bad["shapes"][0]["kernels"]["plain_trace"]["mismatches"] = 7
    bad["shapes"][2]["timeout_flag"] = 1
    found = bench.problems(bad, DEFAULT_LIMIT)
    assert any("plain_trace differs from plain in 7 elements" in line for line in found), found
    assert any("4096x4096x8192" in line and "expired" in line for line in found), found
