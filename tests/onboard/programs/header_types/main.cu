// main(): the timed loop, launching through the wrappers of kernels.cu with the geometry of shared.h.
#include <cstdio>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
#include "shared.h"

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
  const size_t n = 1 << 20;
  float *in, *mid, *out;
  cudaMalloc(&in, n * sizeof(float));
  cudaMalloc(&mid, n * sizeof(float));
  cudaMalloc(&out, n * sizeof(float));
  cudaStream_t s;
  cudaStreamCreate(&s);
  Geometry g = geometry_for(n);
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaEventRecord(t0, s);
  for (int i = 0; i < 30; ++i) {
    launch_decay(in, mid, n, g, s);
    ncclAllReduce(mid, mid, n, ncclFloat, ncclSum, comm, s);
    launch_sharpen(mid, out, n, g, s);
  }
  cudaEventRecord(t1, s);
  cudaEventSynchronize(t1);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
