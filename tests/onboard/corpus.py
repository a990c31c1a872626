"""The public programs of ../shared/corpus/ as `cuco analyze` is run on them: the files and the flags their
own builds pass (the Jacobi Makefile: -DUSE_NVTX for jacobi.cpp, -DHAVE_CUB for the kernels). Tests read
the programs at run time; the project holds none of them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
GOLDENS = Path(__file__).parent / "goldens"
JACOBI_FLAGS = ["-DUSE_NVTX", "-DHAVE_CUB"]
# `cuco init` on Jacobi with the Makefile's CUB and without NVTX: the harness's symbol policy rejects what
# NVTX's header puts in a candidate (its dlopen/getenv injection loader); NVTX only names ranges for a
# profiler, so the workload computes the same iteration. CUB stays: without it the norm is one atomicAdd
# per element, about 300 times slower than the program its author builds.
INIT_FLAGS = {
    "nvidia_jacobi_nccl": ["-UUSE_NVTX", "-DHAVE_CUB"],
    "nvidia_jacobi_nccl_overlap": ["-UUSE_NVTX", "-DHAVE_CUB"],
    "nvidia_jacobi_nccl_graphs": ["-UUSE_NVTX", "-DHAVE_CUB"],
}

# name -> (files relative to the corpus, flags, has a kernel to overlap)
PROGRAMS: dict[str, tuple[list[str], list[str], bool]] = {
    "nvidia_jacobi_nccl": (
        ["nvidia_jacobi_nccl/jacobi.cpp", "nvidia_jacobi_nccl/jacobi_kernels.cu"],
        JACOBI_FLAGS,
        True,
    ),
    "nvidia_jacobi_nccl_overlap": (
        ["nvidia_jacobi_nccl_overlap/jacobi.cpp", "nvidia_jacobi_nccl_overlap/jacobi_kernels.cu"],
        JACOBI_FLAGS,
        True,
    ),
    "nvidia_jacobi_nccl_graphs": (
        ["nvidia_jacobi_nccl_graphs/jacobi.cpp", "nvidia_jacobi_nccl_graphs/jacobi_kernels.cu"],
        JACOBI_FLAGS,
        True,
    ),
    "cuco_moe_seed": (["cuco_moe_seed/ds_v3_moe.cu"], [], True),
    "async_ring_allreduce_single": (["async_ring_allreduce_single/ring_allreduce.cu"], [], True),
    "nccl_examples_allreduce": (["nccl_examples/allreduce.cc"], [], False),
    "nccl_examples_ring": (["nccl_examples/ring.cc"], [], False),
    "nccl_examples_mpi_comm": (["nccl_examples/mpi_comm.cc"], [], False),
}


def comparable(analysis: dict) -> dict:
    """The analysis without what depends on the machine (which system headers are installed)."""
    analysis["preprocessing"].pop("missing_headers", None)
    return analysis
