// A timed loop that runs its step through a lambda written in main().
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
__global__ void k1(float* x, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
__global__ void k2(const float* x, float* y, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * 2.0f; }
void step_sum(float* x, float* y, size_t n, ncclComm_t comm, cudaStream_t s) {
  k1<<<(n + 255) / 256, 256, 0, s>>>(x, n);
  ncclAllReduce(x, x, n, ncclFloat, ncclSum, comm, s);
  k2<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
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
  const size_t n = 1 << 18;
  float *x, *y;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaStream_t s;
  cudaStreamCreate(&s);
  auto step = [&](float* p, float* q) { k1<<<(n + 255) / 256, 256, 0, s>>>(p, n); ncclAllReduce(p, p, n, ncclFloat, ncclSum, comm, s); k2<<<(n + 255) / 256, 256, 0, s>>>(p, q, n); };
  cudaEvent_t a, b;
  cudaEventCreate(&a); cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int it = 0; it < 10; ++it) step(x, y);
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  MPI_Finalize();
  return 0;
}
