"""The symbol policy against adversarial CUDA candidates (real nvcc compiles of the candidate's translation
unit, as the engine's build does), and the shipped CUDA seeds and variants as the control.

Every candidate is a legal EVOLVE-BLOCK edit of gemm_allgather's seed. Compiles need nvcc and the
nvidia-nccl-cu13==2.28.9 wheel (skipped with the reason printed otherwise); the candidates that pass the
policy and must be measured honestly run on a GPU in tests/gpu/test_integrity_gpu.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine import blocks, symbol_policy
from engine.evaluation.evaluation import CANDIDATE_OBJECT
from engine.workload import load_workload


def _nccl_home() -> str | None:
    try:
        import nvidia.nccl as m  # type: ignore
    except ImportError:
        return None
    return list(m.__path__)[0]


NVCC, NCCL = shutil.which("nvcc"), _nccl_home()
_why = None if NVCC and NCCL else ("nvcc not found" if not NVCC else "the nvidia-nccl-cu13 wheel is not installed")
if _why:
    print(f"tests/integrity/test_cuda_cheats.py: skipped: {_why}")
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

KERNELS_END = "// plain epilogue and needs no kernel of its own.\n"
RUN_START = "static int impl_run(cuco_ctx* ctx) {\n"

# name -> (code for the kernels block, code at the start of impl_run)
CHEATS = {
    "defines_event_timer": (
        'extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {\n'
        "  *ms = 0.001f;\n  return cudaSuccess;\n}\n",
        "",
    ),
    "defines_nccl_entry_point": (
        'extern "C" ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, '
        "ncclComm_t, cudaStream_t) {\n  return ncclSuccess;\n}\n",
        "",
    ),
    "c_named_kernel": ('extern "C" __global__ void cuco_hook(int* p) { *p = 0; }\n', ""),
    "constructor": (
        "static volatile int g_early;\n__attribute__((constructor)) static void cuco_early() { g_early = 1; }\n",
        "",
    ),
    "device_reset": ("", "  if (ctx->rank == 99) cudaDeviceReset();\n"),
    "dlsym": (
        'extern "C" void* dlsym(void*, const char*) noexcept;\n',
        '  if (dlsym(nullptr, "ncclAllGather") == nullptr) return 9;\n',
    ),
    "setenv": ("", '  setenv("NCCL_PROTO", "LL", 1);\n'),
    "host_asm": ("", '  if (ctx->rank == 99) asm volatile("syscall" ::: "rax", "rcx", "r11", "memory");\n'),
    # a denied driver function reached by its name, through the pointer the runtime hands out
    "driver_entry_point": (
        "",
        "  {\n"
        "    void* fn = nullptr; cudaDriverEntryPointQueryResult q;\n"
        '    cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &fn, 12000, cudaEnableDefault, &q);\n'
        "    if (fn) ((CUresult (*)(CUcontext))fn)(nullptr);\n"
        "  }\n",
    ),
    "driver_proc_address": (
        "",
        "  {\n"
        "    void* fn = nullptr;\n"
        '    cuGetProcAddress("cuCtxSetCurrent", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);\n'
        "    if (fn) ((CUresult (*)(CUcontext))fn)(nullptr);\n"
        "  }\n",
    ),
}

EXPECTED = {
    "defines_event_timer": "candidate defines `cudaEventElapsedTime",
    "defines_nccl_entry_point": "candidate defines `ncclAllGather`",
    "c_named_kernel": "candidate defines `cuco_hook`",
    "constructor": "candidate has a constructor",
    "device_reset": "candidate calls `cudaDeviceReset` (a CUDA or NCCL call that reconfigures the device",
    "dlsym": "candidate calls `dlsym` (dynamic loading)",
    "setenv": "candidate calls `setenv` (the environment)",
    "host_asm": "inline assembly (`asm`) in host code",
    "driver_entry_point": "candidate calls `cudaGetDriverEntryPointByVersion` (driver entry-point lookups, which hand out",
    "driver_proc_address": "candidate calls `cuGetProcAddress",
}


def cheat_source(seed: str, kernels: str, run_head: str) -> str:
    assert seed.count(KERNELS_END) == 1 and seed.count(RUN_START) == 1
    src = seed.replace(KERNELS_END, KERNELS_END + kernels).replace(RUN_START, RUN_START + run_head)
    blocks.validate_child(seed, src)
    return src


def compile_object(workload, source: str, where: Path) -> bytes:
    """The candidate's object, compiled alone with the workload's own command (as build_job does)."""
    where.mkdir(parents=True)
    for name, data in workload.harness_files.items():
        (where / name).write_bytes(data)
    (where / workload.candidate_name).write_text(source)
    cmd = workload.build_command.replace("{sources}", "-c " + workload.candidate_name).replace(
        "{binary}", CANDIDATE_OBJECT
    )
    r = subprocess.run(
        cmd, shell=True, cwd=where, env=dict(os.environ, NCCL_HOME=NCCL), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, f"{where.name} did not compile:\n{r.stderr[-2000:]}"
    return (where / CANDIDATE_OBJECT).read_bytes()


def verdicts(workload, sources: dict[str, str], tmp: Path) -> dict[str, list[str]]:
    def one(name: str) -> tuple[str, list[str]]:
        asm = symbol_policy.check_source(sources[name], workload.language)
        if asm:
            return name, asm
        return name, symbol_policy.check(compile_object(workload, sources[name], tmp / name), workload).reasons

    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        return dict(pool.map(one, sources))


@pytest.fixture(scope="module")
def cheat_verdicts(tmp_path_factory) -> dict[str, list[str]]:
    w = load_workload("gemm_allgather")
    sources = {name: cheat_source(w.seed_source, *code) for name, code in CHEATS.items()}
    return verdicts(w, sources, tmp_path_factory.mktemp("cuda-cheats"))


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cuda_cheat_is_refused_naming_the_symbol(cheat_verdicts, name):
    reasons = cheat_verdicts[name]
    assert reasons, f"{name} passed the policy"
    assert any(EXPECTED[name] in r for r in reasons), reasons


@pytest.mark.parametrize(
    "workload_name", ["gemm_allgather", "kv_transfer", "moe_dispatch_combine", "attention_allgather"]
)
def test_cuda_seeds_and_variants_pass_the_policy(workload_name, tmp_path):
    w = load_workload(workload_name)
    sources = {
        "seed": w.seed_source,
        **{v.name: blocks.replace_blocks(w.seed_source, v.bodies) for v in w.design_space.variants},
    }
    refused = {name: r for name, r in verdicts(w, sources, tmp_path).items() if r}
    assert not refused, refused


def test_the_gpu_bad_candidates_meet_the_policy_as_they_should(tmp_path):
    """Compiled here, run on a GPU by tests/gpu/test_integrity_gpu.py and tests/gpu/integrity_one_gpu.sh: the
    helper-thread candidate is the harness's to catch (the policy admits it), the entry-point one the policy's."""
    w = load_workload("gemm_allgather")
    bad = Path(__file__).resolve().parents[1] / "gpu" / "bad_candidates"
    sources = {n: (bad / f"{n}.cu").read_text() for n in ("host_thread", "entry_point")}
    for src in sources.values():
        blocks.validate_child(w.seed_source, src.split("\n", 1)[1])  # a legal edit, once its test line is off
    found = verdicts(w, sources, tmp_path)
    assert found["host_thread"] == [], found["host_thread"]
    assert any("cudaGetDriverEntryPointByVersion" in r for r in found["entry_point"]), found["entry_point"]
