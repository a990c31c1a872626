"""The one-GPU benchmark of split_tail's GEMM (tests/bench/bench_split_tail.py), CPU side.

It must keep compiling against the shipped variant, and its --check must fail a wrong kernel by name: a
kernel that promises the baseline's bits (tail split 0, or in 128 x 64 halves) and differs, a k split
outside the bf16 tolerance or touching full tiles, an expired wait. The run needs a GPU:
tests/gpu/test_gemm_codegen_gpu.py.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from tests.test_cuda_workloads import NCCL, NVCC, needs_nvcc

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "bench" / "bench_split_tail.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_split_tail", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def result(**changes) -> dict:
    """A result as the binary prints it: every kernel right (the k splits differ from the baseline's bits
    inside the tail only, as they may)."""
    kernels = {
        name: {"median_ms": 1.0, "vs_plain": 1.0, "mismatches": 0, "out_of_tolerance": 0, "mismatches_before_tail": 0}
        for name in load_bench().KERNELS
    }
    for name in ("k2", "k3", "k4"):
        kernels[name]["mismatches"] = 1200
    for name, fields in changes.items():
        kernels[name].update(fields)
    shape = {"M": 8192, "N": 4096, "K": 8192, "tail": 200, "timeout_flag": 0, "kernels": kernels}
    return {"device": "NVIDIA H100", "sm_count": 132, "slots": 264, "iters": 41, "shapes": [shape]}


@needs_nvcc
def test_bench_compiles_against_the_shipped_split_tail_variant(tmp_path):
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


def test_check_passes_right_kernels_and_prints_every_tail_split():
    bench = load_bench()
    assert bench.problems(result()) == []
    table = bench.table(result())
    assert "8192x4096x8192" in table and "264 CTA slots" in table
    assert all(name in table for name in ("whole", "k2", "k3", "k4", "halves"))


def test_check_names_each_wrong_kernel():
    bench = load_bench()
    found = bench.problems(
        result(
            halves={"mismatches": 3},
            k3={"out_of_tolerance": 2},
            k4={"mismatches_before_tail": 5},
        )
    )
    assert len(found) == 3, found
    assert any("halves differs from the baseline GEMM in 3 elements" in line for line in found), found
    assert any("k3 is outside the bf16 tolerance in 2 elements" in line for line in found), found
    assert any("k4 differs in 5 elements of full tiles" in line for line in found), found
    timed_out = result()
    timed_out["shapes"][0]["timeout_flag"] = 1
    assert bench.problems(timed_out) == ["8192x4096x8192: a bounded wait in the epilogue expired"]


@needs_nvcc
def test_gemm_under_copies_bench_compiles_with_the_shipped_kernels(tmp_path):
    # tests/bench/gemm_codegen/gemm_under_copies.cu: the two-GPU measurement behind docs/gpu-runs.md's
    # account of m8k_k4096 (what the copy traffic costs the baseline's and split_tail's GEMM); built as
    # its header says
    src = ROOT / "tests" / "bench" / "gemm_codegen" / "gemm_under_copies.cu"
    binary = tmp_path / "gemm_under_copies"
    includes = [ROOT / "workloads" / "_harness" / "cuda", ROOT / "workloads" / "gemm_allgather" / "variants"]
    r = subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", "-O3", *(f"-I{d}" for d in includes), f"-I{NCCL}/include", str(src)]
        + ["-o", str(binary), f"-L{NCCL}/lib", "-l:libnccl.so.2", "-Xlinker", f"-rpath,{NCCL}/lib"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert binary.stat().st_size > 0
