"""`cuco init` on the four test programs: a workload folder the engine loads and `cuco validate` compiles
(real nvcc against the NCCL 2.28.9 headers), whose baseline is the program's own region; an existing
folder is never written over; bad input writes nothing; what init cannot place is a CUCO-TODO that
validate lists by file and line."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from cuco_tui.cli import main
from engine import blocks, symbol_policy
from engine.evaluation.evaluation import build_job
from engine.workload import load_workload
from remote.local import LocalExecutor

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
NAMES = ["mpi_allreduce", "env_ring", "moe_alltoall", "gemm_allgather"]


def _init(capsys, *args) -> tuple[int, str, str]:
    rc = main(["init", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _nccl_headers() -> bool:
    try:
        return importlib.util.find_spec("nvidia.nccl") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("name", NAMES)
def test_init_writes_a_workload_the_engine_loads(name, tmp_path, capsys):
    out = tmp_path / name
    rc, stdout, err = _init(capsys, str(PROGRAMS / f"{name}.cu"), "-o", str(out), "--ranks", "1")
    assert rc == 0, err
    assert "TODO" not in stdout  # these four are placed entirely
    w = load_workload(str(out))
    assert w.name == name and w.language == "cuda" and w.ranks == 1 and w.launch_gpus == 1
    assert [b.name for b in blocks.parse_blocks(w.seed_source)] == ["kernels", "schedule"]
    baseline = (out / "baseline.cu").read_text()
    for entry in ("cuco_baseline_run_compute", "cuco_baseline_run_comm", "cuco_baseline_setup"):
        assert entry in baseline
    # the seed's region is the frozen baseline's, character for character
    seed_run = w.seed_source.split("int run() {", 1)[1].split("\n  }\n", 1)[0]
    assert seed_run in baseline
    assert [c.name for c in w.configs] == ["program", "hidden_scaled"]
    assert not w.configs[1].public
    assert "backend" in " ".join(w.design_space.dimensions) and "chunks" in w.design_space.dimensions
    assert w.design_space.descriptor(w.seed_source)["placement"] == "sequential"


def test_init_facts_of_the_allreduce_program(tmp_path, capsys):
    out = tmp_path / "ar"
    assert _init(capsys, str(PROGRAMS / "mpi_allreduce.cu"), "-o", str(out), "--name", "ar")[0] == 0
    w = load_workload(str(out))
    assert w.configs[0].params == {"count": 1 << 22}
    assert w.configs[1].params == {"count": 3 << 20}
    cand = w.seed_source
    # MPI, the communicator, device selection and input preparation are the harness's
    assert "\n    // (the harness owns this) MPI_Init(&argc, &argv);" in cand
    assert "// (input preparation: the harness makes the inputs from its seed) fill_kernel" in cand
    assert "CUDACHECK(cudaMalloc(&y, count * sizeof(float)));" in cand  # scratch stays the program's
    assert "x = (float*)cuco_c->inputs[0].ptr;" in cand and "out = (float*)cuco_c->outputs[0].ptr;" in cand
    compute = (out / "baseline.cu").read_text().split("int run_compute() {", 1)[1].split("\n  }\n", 1)[0]
    assert "ncclAllReduce(" not in compute and "scale_kernel<<<" in compute
    comm = (out / "baseline.cu").read_text().split("int run_comm() {", 1)[1].split("\n  }\n", 1)[0]
    assert "ncclAllReduce(" in comm and "residual_kernel<<<" not in comm
    assert "scale_kernel -> ncclAllReduce -> residual_kernel" in w.task
    problem = (out / "problem.cu").read_text()
    assert 'kOutputs[] = {"out"}' in problem and "kOutputExact[] = {0}" in problem  # computed: tolerance


def test_moved_only_outputs_are_compared_bit_exact(tmp_path, capsys):
    """An output that only data movement produced (a gathered input) is compared bit-exact; one a kernel
    computed, with a tolerance."""
    src = tmp_path / "gather.cu"
    src.write_text(
        (HERE / "todo" / "loopvar_env.cu").read_text().split("__global__")[0]
        + """
__global__ void scale(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 2.f * x[i]; }
int main() {
  ncclUniqueId id; ncclGetUniqueId(&id);
  ncclComm_t comm; ncclCommInitRank(&comm, 1, id, 0);
  const size_t n = 4096;
  int* part; int* all; float* x; float* y;
  cudaMalloc(&part, n * sizeof(int));
  cudaMalloc(&all, 4 * n * sizeof(int));
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaStream_t s; cudaStreamCreate(&s);
  for (int i = 0; i < 5; ++i) {
    scale<<<16, 256, 0, s>>>(x, y, n);
    ncclAllGather(part, all, n, ncclInt32, comm, s);
  }
  return 0;
}
"""
    )
    out = tmp_path / "g"
    assert _init(capsys, str(src), "-o", str(out))[0] == 0
    problem = (out / "problem.cu").read_text()
    assert 'kOutputs[] = {"all", "y"}' in problem and "kOutputExact[] = {1, 0}" in problem


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: the compile is not checked here")
@pytest.mark.skipif(not _nccl_headers(), reason="the NCCL 2.28.9 headers (nvidia-nccl-cu13) are not installed")
@pytest.mark.parametrize("name", NAMES)
def test_validate_compiles_the_init_made_workload(name, tmp_path, capsys, monkeypatch):
    out = tmp_path / name
    assert _init(capsys, str(PROGRAMS / f"{name}.cu"), "-o", str(out))[0] == 0
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", str(out), "--home", str(tmp_path / "home")])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "compiled seed" in text and "workload OK" in text
    # and the seed passes the symbol policy the engine applies between build and verify
    obj = asyncio.run(_build_object(load_workload(str(out))))
    verdict = symbol_policy.check(obj, load_workload(str(out)))
    assert verdict.ok, verdict.reason


async def _build_object(w) -> bytes:
    executor = LocalExecutor(extra_env={"CUCO_PYTHON": sys.executable})
    try:
        res = await executor.run(build_job(w, w.seed_source, "onboard-policy"))
    finally:
        await executor.close()
    assert res.ok, res.log[-2000:]
    return res.outputs["cuco_candidate.o"]


def test_init_never_writes_over_a_folder(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    rc, _, err = _init(capsys, str(PROGRAMS / "env_ring.cu"), "-o", str(out))
    assert rc == 2 and f"{out}: -o: already exists" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("bad", ["syntax_error.cu", "no_nccl.cu", "dynamic_dispatch.cu", "macro_collective.cu"])
def test_init_on_bad_input_exits_2_and_writes_nothing(bad, tmp_path, capsys):
    out = tmp_path / "w"
    rc, _, err = _init(capsys, str(HERE / "bad" / bad), "-o", str(out))
    assert rc == 2 and err.startswith(f"cuco: {HERE / 'bad' / bad}")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_todo_markers_are_listed_by_validate(tmp_path, capsys):
    out = tmp_path / "w"
    rc, stdout, _ = _init(capsys, str(HERE / "todo" / "loopvar_env.cu"), "-o", str(out))
    assert rc == 0
    assert "TODO" in stdout and 'atoi(getenv("STRIDE"))' in stdout and "loop variable t" in stdout
    assert main(["validate", str(out), "--no-compile"]) == 0
    listed = capsys.readouterr().out.replace("\n", " ")
    cand = (out / "candidate.cu").read_text().splitlines()
    line = next(i for i, text in enumerate(cand, 1) if "CUCO-TODO" in text and "STRIDE" in text)
    assert f"{out / 'candidate.cu'}:{line}:" in listed.replace(" ", "") or f"{out / 'candidate.cu'}:{line}" in "".join(
        listed.split()
    )


def test_a_kernel_with_pragma_unroll_passes_the_block_rules(tmp_path, capsys):
    """`#pragma unroll` stays as written, outside the evolvable block (the block rules forbid directives
    inside one, `_Pragma` too), with the code before it; the kernels after it stay evolvable."""
    text = (PROGRAMS / "mpi_allreduce.cu").read_text()
    head, rest = text.split("__global__", 1)
    pragma_kernel = (
        "__global__ void unrolled(const float* x, float* y, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x; float acc = 0.f;\n"
        "  #pragma unroll\n  for (int k = 0; k < 4; ++k) acc += x[(i + k) % n];\n"
        "  if (i < n) y[i] = acc;\n}\n"
    )
    src = tmp_path / "unrolled.cu"
    src.write_text(head + pragma_kernel + "__global__" + rest)
    out = tmp_path / "w"
    assert _init(capsys, str(src), "-o", str(out))[0] == 0
    cand = (out / "candidate.cu").read_text()
    blocks.check_block_bodies(cand)  # raises on a directive inside a block
    frozen, block = cand.split("// EVOLVE-BLOCK-START kernels", 1)
    assert "#pragma unroll" in frozen and "_Pragma" not in cand
    assert "scale_kernel" in block.split("// EVOLVE-BLOCK-END")[0]


def test_one_process_driving_every_gpu_is_refused_in_one_line(tmp_path, capsys):
    src = tmp_path / "all.cu"
    src.write_text("""#include <nccl.h>
#include <cuda_runtime.h>
__global__ void k(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.f; }
int main() {
  const int ndev = 2;
  ncclComm_t comms[ndev];
  int devs[ndev] = {0, 1};
  ncclCommInitAll(comms, ndev, devs);
  float* x[ndev]; cudaStream_t s[ndev];
  for (int i = 0; i < ndev; ++i) { cudaSetDevice(i); cudaMalloc(&x[i], 1024 * sizeof(float)); cudaStreamCreate(&s[i]); }
  for (int it = 0; it < 10; ++it) {
    ncclGroupStart();
    for (int i = 0; i < ndev; ++i) {
      cudaSetDevice(i);
      k<<<1, 1024, 0, s[i]>>>(x[i], 1024);
      ncclAllReduce(x[i], x[i], 1024, ncclFloat, ncclSum, comms[i], s[i]);
    }
    ncclGroupEnd();
  }
  return 0;
}
""")
    rc, out, err = _init(capsys, str(src), "-o", str(tmp_path / "w"))
    assert rc == 2 and err.count("\n") == 1 and out == ""
    assert f"one process drives every GPU (ncclCommInitAll at {src}:8)" in err
    assert not (tmp_path / "w").exists()
