// A program built by its Makefile: profiler ranges behind USE_NVTX, the scale factor a -D define, and a
// link line naming libraries of its own.
#include <cstdio>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
#ifdef USE_NVTX
#include <nvtx3/nvToolsExt.h>
#define RANGE_PUSH(name) nvtxRangePushA(name)
#define RANGE_POP() nvtxRangePop()
#else
#define RANGE_PUSH(name)
#define RANGE_POP()
#endif
#ifndef SCALE
#error "build with the Makefile: it defines SCALE"
#endif

__global__ void stretch(const float* src, float* dst, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] * SCALE - 1.0f;
}

__global__ void settle(const float* sum, float* result, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) result[i] = sum[i] / (1.0f + sum[i] * sum[i]);
}

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
  float *src, *dst, *result;
  cudaMalloc(&src, n * sizeof(float));
  cudaMalloc(&dst, n * sizeof(float));
  cudaMalloc(&result, n * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, stream);
  for (int k = 0; k < 10; ++k) {
    RANGE_PUSH("iteration");
    stretch<<<(n + 255) / 256, 256, 0, stream>>>(src, dst, n);
    ncclAllReduce(dst, dst, n, ncclFloat, ncclSum, comm, stream);
    settle<<<(n + 255) / 256, 256, 0, stream>>>(dst, result, n);
    RANGE_POP();
  }
  cudaEventRecord(b, stream);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  if (rank == 0) printf("%.3f ms\n", ms / 10);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
