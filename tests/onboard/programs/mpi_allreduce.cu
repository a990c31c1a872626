// An MPI program, one GPU per process: every rank scales its input, the ranks sum the result with
// ncclAllReduce, and a consumer kernel adds the residual. The loop is timed with CUDA events.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

#define CUDACHECK(cmd) do { cudaError_t e = (cmd); if (e != cudaSuccess) { \
    printf("CUDA error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define NCCLCHECK(cmd) do { ncclResult_t r = (cmd); if (r != ncclSuccess) { \
    printf("NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

__global__ void fill_kernel(float* x, size_t n, int rank) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = (float)((i * 7 + rank) % 13) * 0.25f;
}

__global__ void scale_kernel(const float* x, float* y, size_t n, float alpha) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + 1.0f;
}

__global__ void residual_kernel(const float* y, const float* x, float* out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = y[i] - x[i];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  CUDACHECK(cudaSetDevice(rank % 8));

  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));

  const size_t count = 1 << 22;
  const int iters = 20;
  float *x, *y, *out;
  CUDACHECK(cudaMalloc(&x, count * sizeof(float)));
  CUDACHECK(cudaMalloc(&y, count * sizeof(float)));
  CUDACHECK(cudaMalloc(&out, count * sizeof(float)));
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int threads = 256;
  const int blocks = (int)((count + threads - 1) / threads);
  fill_kernel<<<blocks, threads, 0, stream>>>(x, count, rank);

  cudaEvent_t start, stop;
  CUDACHECK(cudaEventCreate(&start));
  CUDACHECK(cudaEventCreate(&stop));
  CUDACHECK(cudaStreamSynchronize(stream));
  MPI_Barrier(MPI_COMM_WORLD);
  CUDACHECK(cudaEventRecord(start, stream));
  for (int it = 0; it < iters; ++it) {
    scale_kernel<<<blocks, threads, 0, stream>>>(x, y, count, 2.0f);
    NCCLCHECK(ncclAllReduce(y, y, count, ncclFloat, ncclSum, comm, stream));
    residual_kernel<<<blocks, threads, 0, stream>>>(y, x, out, count);
  }
  CUDACHECK(cudaEventRecord(stop, stream));
  CUDACHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDACHECK(cudaEventElapsedTime(&ms, start, stop));
  if (rank == 0) printf("%.3f ms per iteration\n", ms / iters);

  CUDACHECK(cudaFree(x));
  CUDACHECK(cudaFree(y));
  CUDACHECK(cudaFree(out));
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
