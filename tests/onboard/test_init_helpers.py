"""`cuco init` on programs whose repeated region sits in helper functions, written the way users write
them: a main() that only sets up and calls one helper holding the timed loop is read with the helper as
main(); a helper the region calls is carried with its compute-only and comm-only forms; collectives a
helper reaches through another helper are carried too, each with its forms."""

from __future__ import annotations

from cuco_tui.cli import main

PROLOGUE = """#include <cuda_runtime.h>
#include <nccl.h>
#include <mpi.h>
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
"""

# main()'s opening as users write it: MPI hands out the ranks and the NCCL id, one communicator per rank
MAIN_WITH_COMM = """int main(int argc, char** argv) {
  int rank, nranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id; if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  ncclComm_t comm; ncclCommInitRank(&comm, nranks, id, rank);
"""

LOOP_IN_HELPER = (
    PROLOGUE
    + """
void solve(int rank, int nranks, ncclComm_t comm) {
  cudaStream_t s; cudaStreamCreate(&s);
  const int n = 1 << 20;
  float* buf; cudaMalloc(&buf, n * sizeof(float));
  cudaMemset(buf, 0, n * sizeof(float));
  cudaEvent_t t0, t1; cudaEventCreate(&t0); cudaEventCreate(&t1);
  cudaEventRecord(t0, s);
  for (int it = 0; it < 100; it++) {
    scale<<<(n + 255) / 256, 256, 0, s>>>(buf, n);
    ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, s);
  }
  cudaEventRecord(t1, s);
  cudaFree(buf);
}

"""
    + MAIN_WITH_COMM
    + """  solve(rank, nranks, comm);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
"""
)

NESTED = (
    PROLOGUE
    + """
static void exchange(float* buf, int n, ncclComm_t comm, cudaStream_t s) {
  ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, s);
}
static void step(float* buf, int n, ncclComm_t comm, cudaStream_t s) {
  exchange(buf, n, comm, s);
}

"""
    + MAIN_WITH_COMM
    + """  cudaStream_t s; cudaStreamCreate(&s);
  const int n = 1 << 20;
  float* buf; cudaMalloc(&buf, n * sizeof(float));
  cudaMemset(buf, 0, n * sizeof(float));
  for (int it = 0; it < 100; it++) {
    scale<<<(n + 255) / 256, 256, 0, s>>>(buf, n);
    step(buf, n, comm, s);
  }
  MPI_Finalize();
  return 0;
}
"""
)


def _init(capsys, *args):
    rc = main(["init", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_helper_holding_the_timed_loop_is_read_as_main(tmp_path, capsys):
    prog = tmp_path / "helper_loop.cu"
    prog.write_text(LOOP_IN_HELPER)
    rc, out, err = _init(capsys, prog, "-o", tmp_path / "w")
    assert rc == 0, err
    assert "main() calls solve(), which holds the timed section" in out
    candidate = (tmp_path / "w" / "candidate.cu").read_text()
    setup = candidate.split("int setup() {", 1)[1].split("return 0;", 1)[0]
    assert "rank = cuco_c->rank;" in setup and "nranks = cuco_c->nranks;" in setup and "comm = cuco_c->comm;" in setup
    run = candidate.split("int run() {", 1)[1].split("return 0;", 1)[0]
    assert "scale<<<" in run and "ncclAllReduce(buf, buf, n" in run
    assert "CUCO-TODO" not in candidate


def test_collectives_through_a_helper_of_a_helper_are_carried_with_their_forms(tmp_path, capsys):
    """step() calls exchange(), which holds the all-reduce: both are carried, and the overlap bound's
    compute-only form of step calls exchange's compute-only form (no collective left in it)."""
    prog = tmp_path / "nested.cu"
    prog.write_text(NESTED)
    rc, out, err = _init(capsys, prog, "-o", tmp_path / "w")
    assert rc == 0, err
    baseline = (tmp_path / "w" / "baseline.cu").read_text()
    compute = baseline.split("static void step_cuco_compute(")[1].split("\n}")[0]
    assert "exchange_cuco_compute(buf, n, comm, s);" in compute
    exchange = baseline.split("static void exchange_cuco_compute(")[1].split("\n}")[0]
    assert "ncclAllReduce(" not in exchange
    # callees before callers: each form is defined before the form that calls it
    assert baseline.index("static void exchange_cuco_compute(") < baseline.index("static void step_cuco_compute(")
    skip_comm = (tmp_path / "w" / "checks" / "skip_comm.cu").read_text()
    assert "step_cuco_compute(" in skip_comm.split("int run() {")[1]
