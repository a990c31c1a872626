// A program init cannot take over entirely: its region uses the loop variable, and one of the sizes its
// kernels take comes from the environment. init marks both as CUCO-TODO (cuco validate lists them).
#include <cstdlib>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

__global__ void step_kernel(const float* x, float* y, int n, float t, int stride) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[(i * stride) % n] * t;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  ncclCommInitRank(&comm, nranks, id, rank);
  const int n = 1 << 16;
  int stride = atoi(getenv("STRIDE"));
  float *x, *y, *z;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaMalloc(&z, n * sizeof(float));
  cudaStream_t s;
  cudaStreamCreate(&s);
  for (int t = 0; t < 8; ++t) {
    step_kernel<<<n / 256, 256, 0, s>>>(x, y, n, 1.0f + t, stride);
    ncclAllReduce(y, z, n, ncclFloat, ncclSum, comm, s);
  }
  cudaStreamSynchronize(s);
  MPI_Finalize();
  return 0;
}
