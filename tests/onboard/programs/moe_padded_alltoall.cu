// A mixture-of-experts layer in the style of a padded host all-to-all: the tokens already sit in one
// capacity-sized chunk per expert, ncclAlltoAll dispatches them into the program's own receive buffer, two
// kernels (up-projection into a scratch buffer, down-projection) compute every received chunk, and a second
// ncclAlltoAll combines the results back. Once `cuco init` makes the tokens and the combined output NCCL
// windows, the receive buffer and the expert output share a call with a registered buffer each.
#include <cstdio>
#include <vector>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

__global__ void up_proj(const float* in, float* mid, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) mid[i] = in[i] * 1.5f + 0.25f;
}

__global__ void down_proj(const float* mid, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mid[i] * 0.5f - 1.0f;
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

  const int hidden = 512;
  const int chunk_tokens = 1024;                 // the padded chunk each expert receives from each rank
  const size_t chunk_elems = (size_t)chunk_tokens * hidden;
  const size_t total = chunk_elems * nranks;

  float *tokens, *recv, *mid, *expert_out, *combined;
  cudaMalloc(&tokens, total * sizeof(float));
  cudaMalloc(&recv, total * sizeof(float));
  cudaMalloc(&mid, total * sizeof(float));
  cudaMalloc(&expert_out, total * sizeof(float));
  cudaMalloc(&combined, total * sizeof(float));
  std::vector<float> host(total);
  for (size_t i = 0; i < total; ++i) host[i] = (float)((i + rank) % 89) / 89.0f;
  cudaMemcpy(tokens, host.data(), total * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);

  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaEventRecord(t0, stream);
  for (int iter = 0; iter < 20; ++iter) {
    ncclAlltoAll(tokens, recv, chunk_elems, ncclFloat, comm, stream);
    up_proj<<<(int)((total + 255) / 256), 256, 0, stream>>>(recv, mid, (int)total);
    down_proj<<<(int)((total + 255) / 256), 256, 0, stream>>>(mid, expert_out, (int)total);
    ncclAlltoAll(expert_out, combined, chunk_elems, ncclFloat, comm, stream);
  }
  cudaEventRecord(t1, stream);
  cudaEventSynchronize(t1);
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  if (rank == 0) printf("dispatch+experts+combine: %.3f ms\n", ms / 20);
  MPI_Finalize();
  return 0;
}
