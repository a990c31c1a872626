// gemm_allgather as a standalone MPI program: every rank r computes its block C_r = A * B_r^T (bf16
// inputs, fp32 accumulation, bf16 out) with a shared-memory tiled GEMM, then ncclAllGather (in place)
// gives every rank C = [C_0, C_1, ...]. The same computation as cuco's shipped gemm_allgather seed.
#include <cstdio>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s\n", cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "%s\n", ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

constexpr int TILE = 32;

// C (M x N, ldc) = A (M x K) * B (N x K)^T
__global__ void gemm_bf16_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                 int M, int N, int K, long long ldc) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE + 1];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[threadIdx.y][threadIdx.x] = __bfloat162float(A[(size_t)row * K + k0 + threadIdx.x]);
    Bs[threadIdx.y][threadIdx.x] = __bfloat162float(B[(size_t)(blockIdx.x * TILE + threadIdx.y) * K + k0 + threadIdx.x]);
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[threadIdx.x][k];
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * ldc + col] = __float2bfloat16(acc);
}

__global__ void init_bf16(__nv_bfloat16* p, size_t n, unsigned seed) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = __float2bfloat16((float)((i * 2654435761u + seed) % 1000) / 500.0f - 1.0f);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  CHECK_CUDA(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));

  const int M = 2048, N = 1024, K = 1024;
  __nv_bfloat16 *A, *B, *C;
  CHECK_CUDA(cudaMalloc(&A, (size_t)M * K * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMalloc(&B, (size_t)N * K * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMalloc(&C, (size_t)nranks * M * N * sizeof(__nv_bfloat16)));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  init_bf16<<<(M * K + 255) / 256, 256, 0, stream>>>(A, (size_t)M * K, 1);
  init_bf16<<<(N * K + 255) / 256, 256, 0, stream>>>(B, (size_t)N * K, 100 + rank);

  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  dim3 block(TILE, TILE);
  dim3 grid(N / TILE, M / TILE);
  for (int warm = 0; warm < 3; ++warm) {
    gemm_bf16_kernel<<<grid, block, 0, stream>>>(A, B, C + (size_t)rank * M * N, M, N, K, N);
    CHECK_NCCL(ncclAllGather(C + (size_t)rank * M * N, C, (size_t)M * N, ncclBfloat16, comm, stream));
  }
  CHECK_CUDA(cudaEventRecord(start, stream));
  for (int it = 0; it < 20; ++it) {
    gemm_bf16_kernel<<<grid, block, 0, stream>>>(A, B, C + (size_t)rank * M * N, M, N, K, N);
    CHECK_NCCL(ncclAllGather(C + (size_t)rank * M * N, C, (size_t)M * N, ncclBfloat16, comm, stream));
  }
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  if (rank == 0) printf("gemm+allgather %.3f ms\n", ms / 20);
  CHECK_NCCL(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
