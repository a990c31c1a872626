// A halo-exchange stencil in the style of a Jacobi solver: MPI, one GPU per process; each rank owns rows
// iy_start..iy_end-1 of a ping-pong pair of grids; a launch wrapper computes a row range and accumulates
// the residual; the boundary rows go to the neighbours by grouped ncclSend / ncclRecv; the residual is
// summed on the host with MPI_Allreduce after a stream synchronisation.
#include <cmath>
#include <cstdio>
#include <utility>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

#define CUDACHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("cuda %s\n", cudaGetErrorString(e_)); return 1; } } while (0)
#define NCCLCHECK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { printf("nccl %s\n", ncclGetErrorString(r_)); return 1; } } while (0)

__global__ void relax_kernel(float* a_new, const float* a, float* norm, int iy_start, int iy_end, int nx) {
  int iy = blockIdx.y + iy_start;
  int ix = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (iy < iy_end && ix < nx - 1) {
    float v = 0.25f * (a[iy * nx + ix + 1] + a[iy * nx + ix - 1] + a[(iy + 1) * nx + ix] + a[(iy - 1) * nx + ix]);
    a_new[iy * nx + ix] = v;
    atomicAdd(norm, (v - a[iy * nx + ix]) * (v - a[iy * nx + ix]));
  }
}

void launch_relax(float* a_new, const float* a, float* norm, int iy_start, int iy_end, int nx, cudaStream_t stream) {
  dim3 grid((nx + 255) / 256, iy_end - iy_start);
  relax_kernel<<<grid, 256, 0, stream>>>(a_new, a, norm, iy_start, iy_end, nx);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CUDACHECK(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, size, id, rank));

  const int nx = 4096;
  const int rows = 1024;
  const int iter_max = 200;
  float* a;
  float* a_new;
  CUDACHECK(cudaMalloc(&a, nx * (rows + 2) * sizeof(float)));
  CUDACHECK(cudaMalloc(&a_new, nx * (rows + 2) * sizeof(float)));
  CUDACHECK(cudaMemset(a, 0, nx * (rows + 2) * sizeof(float)));
  CUDACHECK(cudaMemset(a_new, 0, nx * (rows + 2) * sizeof(float)));
  float* norm_d;
  float* norm_h;
  CUDACHECK(cudaMalloc(&norm_d, sizeof(float)));
  CUDACHECK(cudaMallocHost(&norm_h, sizeof(float)));
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreate(&stream));
  const int iy_start = 1;
  const int iy_end = iy_start + rows;
  const int top = rank > 0 ? rank - 1 : size - 1;
  const int bottom = (rank + 1) % size;

  float norm = 1.0f;
  int iter = 0;
  double start = MPI_Wtime();
  while (norm > 1e-8f && iter < iter_max) {
    CUDACHECK(cudaMemsetAsync(norm_d, 0, sizeof(float), stream));
    launch_relax(a_new, a, norm_d, iy_start, iy_end, nx, stream);
    CUDACHECK(cudaMemcpyAsync(norm_h, norm_d, sizeof(float), cudaMemcpyDeviceToHost, stream));
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclRecv(a_new, nx, ncclFloat, top, comm, stream));
    NCCLCHECK(ncclSend(a_new + (iy_end - 1) * nx, nx, ncclFloat, bottom, comm, stream));
    NCCLCHECK(ncclRecv(a_new + iy_end * nx, nx, ncclFloat, bottom, comm, stream));
    NCCLCHECK(ncclSend(a_new + iy_start * nx, nx, ncclFloat, top, comm, stream));
    NCCLCHECK(ncclGroupEnd());
    CUDACHECK(cudaStreamSynchronize(stream));
    MPI_Allreduce(norm_h, &norm, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    norm = std::sqrt(norm);
    std::swap(a_new, a);
    iter++;
  }
  double stop = MPI_Wtime();
  if (rank == 0) printf("%d iterations, norm %f, %f s\n", iter, norm, stop - start);
  CUDACHECK(cudaFree(a));
  CUDACHECK(cudaFree(a_new));
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
