// A program of a class hierarchy across files: main() runs the implementation a factory makes
// (reducer.h, impls.cu) through its virtual run(); each implementation reduces through a helper in a third
// file (comm.cu).
#include <cstdio>
#include <memory>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
#include "reducer.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  cudaSetDevice(rank);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  ncclCommInitRank(&comm, nranks, id, rank);

  const size_t n = 1 << 19;
  float *in, *partial, *out;
  cudaMalloc(&in, n * sizeof(float));
  cudaMalloc(&partial, n * sizeof(float));
  cudaMalloc(&out, n * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  std::unique_ptr<Reducer> impl = make_reducer();

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int rep = 0; rep < 20; ++rep) {
    impl->run(in, partial, out, n, comm, stream);
  }
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  if (rank == 0) printf("%.3f ms\n", ms / 20);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
