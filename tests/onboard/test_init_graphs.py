"""`cuco init` on programs that capture their iteration as a CUDA graph and replay it: the replay loop is
the region and what it replays is the capture. setup() captures as the program does, run() replays; the
baseline also captures the graph without its collectives and without its kernels (the overlap bound's
halves), and the skip_comm check replays the one without collectives, so that a workload whose
verification accepts a candidate that skips the communication is caught. A replay whose capture cuco cannot
place is refused in one line naming why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cuco_tui.cli import main
from tests.onboard.toolchain import compiles_with_nccl

COMPILES = compiles_with_nccl("the graph check's build is not tried here")
RUN_LOCAL = Path(__file__).resolve().parents[2] / "workloads" / "_harness" / "cuda" / "run_local.py"

PROLOGUE = """#include <cuda_runtime.h>
#include <nccl.h>
#include <mpi.h>
__global__ void scale(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }
__global__ void bias(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 1.0f; }
"""

MAIN_OPENING = """int main(int argc, char** argv) {
  int rank, nranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id; if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  ncclComm_t comm; ncclCommInitRank(&comm, nranks, id, rank);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int n = 1 << 20;
  float *x, *y;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
"""

REPLAY = """  cudaEvent_t t0, t1; cudaEventCreate(&t0); cudaEventCreate(&t1);
  cudaEventRecord(t0, s);
  for (int it = 0; it < 100; it++) {
    cudaGraphLaunch(exec, s);
  }
  cudaEventRecord(t1, s);
  cudaEventSynchronize(t1);
  MPI_Finalize();
  return 0;
}
"""

# the capture as straight-line statements in main(): begin, the work, end, instantiate
STRAIGHT_CAPTURE = (
    PROLOGUE
    + MAIN_OPENING
    + """  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
  ncclAllReduce(y, y, n, ncclFloat, ncclSum, comm, s);
  bias<<<(n + 255) / 256, 256, 0, s>>>(y, n);
  cudaStreamEndCapture(s, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
"""
    + REPLAY
)

# a replay beside communication the region makes itself: the graph computes, the all-reduce follows it
REPLAY_THEN_COLLECTIVE = (
    PROLOGUE
    + MAIN_OPENING
    + """  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
  bias<<<(n + 255) / 256, 256, 0, s>>>(y, n);
  cudaStreamEndCapture(s, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
"""
    + REPLAY.replace(
        "    cudaGraphLaunch(exec, s);\n",
        "    cudaGraphLaunch(exec, s);\n    ncclAllReduce(y, y, n, ncclFloat, ncclSum, comm, s);\n",
    )
)

CAPTURE_IN_HELPER = (
    PROLOGUE
    + """
static cudaGraphExec_t record(const float* x, float* y, int n, ncclComm_t comm, cudaStream_t s) {
  cudaGraph_t graph; cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
  ncclAllReduce(y, y, n, ncclFloat, ncclSum, comm, s);
  cudaStreamEndCapture(s, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
  return exec;
}

"""
    + MAIN_OPENING
    + """  cudaGraphExec_t exec = record(x, y, n, comm, s);
"""
    + REPLAY
)

# the graph built node by node (no capture): what it runs is nowhere the analysis can read it
BUILT_NOT_CAPTURED = (
    PROLOGUE
    + MAIN_OPENING
    + """  cudaGraph_t graph; cudaGraphCreate(&graph, 0);
  cudaGraphExec_t exec;
  cudaGraphInstantiate(&exec, graph, 0);
  ncclAllReduce(y, y, n, ncclFloat, ncclSum, comm, s);
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
"""
    + REPLAY
)


def _init(capsys, tmp_path, text: str, name: str):
    prog = tmp_path / f"{name}.cu"
    prog.write_text(text)
    rc = main(["init", str(prog), "--ranks", "2", "-o", str(tmp_path / name)])
    out = capsys.readouterr()
    return rc, out.out, out.err, prog


def _part(text: str, start: str) -> str:
    return text.split(start, 1)[1].split("\n  }\n", 1)[0]


def test_a_captured_iteration_is_captured_in_setup_and_replayed_by_run(tmp_path, capsys):
    rc, out, err, _ = _init(capsys, tmp_path, STRAIGHT_CAPTURE, "graph_allreduce")
    assert rc == 0, err
    assert "TODO" not in out
    w = tmp_path / "graph_allreduce"
    seed, baseline, nothing, skip = (
        (w / f).read_text() for f in ("candidate.cu", "baseline.cu", "checks/do_nothing.cu", "checks/skip_comm.cu")
    )
    setup = _part(seed, "int setup() {")
    assert "cudaStreamBeginCapture(s," in setup and "ncclAllReduce(y, y, n" in setup
    assert "cudaGraphInstantiate(&exec, graph, 0);" in setup
    # captured on the harness's stream, the one the region replays on (its timing is that stream's)
    assert "s = cuco_c->stream;" in setup and "// (the harness gives the timed stream) cudaStreamCreate" in setup
    assert _part(seed, "int run() {").strip() == "cudaGraphLaunch(exec, s);\n    return 0;"
    assert "cudaGraphExecDestroy(exec)" in _part(seed, "int teardown() {")
    # the baseline's bound: the same capture without the all-reduce, and without the kernels
    assert "cudaGraphLaunch(exec_cuco_compute, s);" in _part(baseline, "int run_compute() {")
    assert "cudaGraphLaunch(exec_cuco_comm, s);" in _part(baseline, "int run_comm() {")
    base_setup = _part(baseline, "int setup() {")
    compute = base_setup.split("without its collectives", 1)[1].split("without its kernels", 1)[0]
    assert "/* ncclAllReduce: not in this variant */" in compute and "scale<<<" in compute and "bias<<<" in compute
    comm = base_setup.split("without its kernels", 1)[1]
    assert "ncclAllReduce(y, y, n" in comm and "<<<" not in comm
    # the checks: nothing launched at all; the graph without its collectives
    assert "cudaGraphLaunch" not in _part(nothing, "int run() {")
    assert _part(skip, "int run() {").strip() == "cudaGraphLaunch(exec_cuco_compute, s);\n    return 0;"
    skip_setup = _part(skip, "int setup() {").split("without its collectives", 1)[1]
    assert "/* ncclAllReduce: not in this variant */" in skip_setup and "ncclAllReduce(" not in skip_setup
    assert "cudaGraphExecDestroy(exec_cuco_compute)" in _part(skip, "int teardown() {")


def test_a_replay_beside_the_regions_own_collective(tmp_path, capsys):
    rc, out, err, _ = _init(capsys, tmp_path, REPLAY_THEN_COLLECTIVE, "replay_then_allreduce")
    assert rc == 0, err
    w = tmp_path / "replay_then_allreduce"
    seed, skip = (w / "candidate.cu").read_text(), (w / "checks" / "skip_comm.cu").read_text()
    assert "ctx->outputs[0] = y" in seed  # the graph writes it, the all-reduce then reads it
    assert _part(seed, "int run() {").split() == [
        "cudaGraphLaunch(exec,",
        "s);",
        "ncclAllReduce(y,",
        "y,",
        "n,",
        "ncclFloat,",
        "ncclSum,",
        "comm,",
        "s);",
        "return",
        "0;",
    ]
    run = _part(skip, "int run() {")
    assert "cudaGraphLaunch(exec_cuco_compute, s);" in run and "/* ncclAllReduce: not in this variant */" in run


@COMPILES
def test_the_graph_checks_build_with_the_harness(tmp_path, capsys):
    rc, _, err, _ = _init(capsys, tmp_path, STRAIGHT_CAPTURE, "graph_allreduce")
    assert rc == 0, err
    w = tmp_path / "graph_allreduce"
    done = subprocess.run(
        [
            sys.executable,
            str(RUN_LOCAL),
            str(w),
            "--source",
            str(w / "checks" / "skip_comm.cu"),
            "--build-only",
            "--build-dir",
            str(tmp_path / "build"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_capture_in_a_helper_is_refused_naming_it(tmp_path, capsys):
    rc, out, err, prog = _init(capsys, tmp_path, CAPTURE_IN_HELPER, "helper_capture")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert f"captured outside main() ({prog}:" in err and "in record)" in err
    assert not (tmp_path / "helper_capture").exists()


def test_a_replayed_graph_with_no_capture_is_refused(tmp_path, capsys):
    rc, out, err, _ = _init(capsys, tmp_path, BUILT_NOT_CAPTURED, "built_graph")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert (
        "replays CUDA graphs whose capture (cudaStreamBeginCapture ... cudaStreamEndCapture) the analysis "
        "does not find" in err
    )
    assert not (tmp_path / "built_graph").exists()
