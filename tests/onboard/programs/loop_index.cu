// A program whose timed loop hands its index to a kernel: each step shifts the phase of the signal it
// makes from the step number, so step 3 computes something step 0 never does.
#include <cstdio>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

__global__ void phase_kernel(const float* base, float* signal, size_t n, int step) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) signal[i] = base[i] * (float)(1 + (step % 5)) + 0.125f * (float)step;
}

__global__ void mix_kernel(const float* signal, float* mixed, size_t n, int step) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) mixed[i] = signal[(i + step) % n] - signal[i];
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

  const size_t n = 1 << 18;
  const int steps = 12;
  float *base, *signal, *mixed;
  cudaMalloc(&base, n * sizeof(float));
  cudaMalloc(&signal, n * sizeof(float));
  cudaMalloc(&mixed, n * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaEventRecord(t0, stream);
  for (int step = 0; step < steps; ++step) {
    phase_kernel<<<(n + 255) / 256, 256, 0, stream>>>(base, signal, n, step);
    ncclAllReduce(signal, signal, n, ncclFloat, ncclSum, comm, stream);
    mix_kernel<<<(n + 255) / 256, 256, 0, stream>>>(signal, mixed, n, step);
  }
  cudaEventRecord(t1, stream);
  cudaEventSynchronize(t1);
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  if (rank == 0) printf("%.3f ms per step\n", ms / steps);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
