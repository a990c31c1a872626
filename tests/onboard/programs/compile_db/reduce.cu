// A program built by CMake (its compile_commands.json holds the flags): the element type chosen by
// USE_DOUBLE, the timer by TIME_WITH_MPI (an MPI barrier and MPI_Wtime around the loop).
#include <cstdio>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
#ifdef USE_DOUBLE
typedef double real;
#define NCCL_REAL ncclDouble
#else
typedef float real;
#define NCCL_REAL ncclFloat
#endif

__global__ void weigh(const real* x, real* w, size_t n, real alpha) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) w[i] = alpha * x[i] * x[i];
}

__global__ void normalise(const real* total, real* y, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = total[i] / (real)(1 + i % 7);
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
  const size_t n = 1 << 19;
  real *x, *w, *y;
  cudaMalloc(&x, n * sizeof(real));
  cudaMalloc(&w, n * sizeof(real));
  cudaMalloc(&y, n * sizeof(real));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
#ifdef TIME_WITH_MPI
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
#endif
  for (int r = 0; r < 25; ++r) {
    weigh<<<(n + 127) / 128, 128, 0, stream>>>(x, w, n, (real)0.5);
    ncclAllReduce(w, w, n, NCCL_REAL, ncclSum, comm, stream);
    normalise<<<(n + 127) / 128, 128, 0, stream>>>(w, y, n);
  }
  cudaStreamSynchronize(stream);
#ifdef TIME_WITH_MPI
  double t1 = MPI_Wtime();
  if (rank == 0) printf("%.3f ms\n", (t1 - t0) * 1e3 / 25);
#endif
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
