// An MPI program that checks every call through its own two-argument functions (not macros), keeps its
// launch shape in a struct and a file-scope constant, and computes through a small device helper.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

static const int kThreads = 128;
static int g_verbose = 0;

struct LaunchShape {
  int blocks;
  int threads;
};

static void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static void check_nccl(ncclResult_t res, const char* what) {
  if (res != ncclSuccess) {
    fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(res));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (g_verbose) fprintf(stderr, "%s ok\n", what);
}

static LaunchShape shape_for(size_t n) {
  LaunchShape s;
  s.threads = kThreads;
  s.blocks = (int)((n + kThreads - 1) / kThreads);
  return s;
}

__device__ __forceinline__ float smooth(float v) { return v / (1.0f + fabsf(v)); }

__global__ void produce(const float* in, float* work, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) work[i] = smooth(in[i]) * 3.0f;
}

__global__ void consume(const float* work, float* out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = smooth(work[i]) + 0.5f;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  check(cudaSetDevice(rank % 8), "cudaSetDevice");

  ncclUniqueId id;
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");

  const size_t n = 1 << 20;
  float *in, *work, *out;
  check(cudaMalloc(&in, n * sizeof(float)), "cudaMalloc in");
  check(cudaMalloc(&work, n * sizeof(float)), "cudaMalloc work");
  check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc out");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  check(cudaMemset(in, 0, n * sizeof(float)), "cudaMemset");
  LaunchShape shape = shape_for(n);

  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "cudaEventCreate");
  check(cudaEventCreate(&t1), "cudaEventCreate");
  check(cudaEventRecord(t0, stream), "cudaEventRecord");
  for (int step = 0; step < 50; ++step) {
    produce<<<shape.blocks, shape.threads, 0, stream>>>(in, work, n);
    check(cudaGetLastError(), "produce");
    check_nccl(ncclAllReduce(work, work, n, ncclFloat, ncclSum, comm, stream), "ncclAllReduce");
    consume<<<shape.blocks, shape.threads, 0, stream>>>(work, out, n);
    check(cudaGetLastError(), "consume");
  }
  check(cudaEventRecord(t1, stream), "cudaEventRecord");
  check(cudaEventSynchronize(t1), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
  if (rank == 0) printf("%.3f ms per step\n", ms / 50);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
