// An all-to-all exchange in the style of a mixture-of-experts layer: a router kernel packs each token's
// hidden vector into a per-destination send buffer (dispatch), the tokens travel with grouped
// ncclSend / ncclRecv of uneven counts, an expert kernel transforms what arrived, and a second grouped
// exchange sends the results back (combine). Capacity-sized buffers; counts differ per peer.
#include <cstdio>
#include <vector>
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>

__global__ void pack_kernel(const float* tokens, float* send, int tokens_per_rank, int hidden) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < tokens_per_rank * hidden) send[i] = tokens[i] * 1.0f;
}

__global__ void expert_kernel(const float* recv, float* expert_out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) expert_out[i] = recv[i] * 0.5f + 1.0f;
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

  const int hidden = 1024;
  const int capacity = 2048;                    // tokens per peer slot
  const int tokens_per_rank = capacity * nranks;
  std::vector<size_t> send_counts(nranks), send_offsets(nranks);
  for (int p = 0; p < nranks; ++p) {
    send_counts[p] = (size_t)(capacity - 64 * ((rank + p) % 4)) * hidden;   // uneven per peer
    send_offsets[p] = (size_t)p * capacity * hidden;
  }
  std::vector<size_t> recv_counts(nranks);
  for (int p = 0; p < nranks; ++p) recv_counts[p] = (size_t)(capacity - 64 * ((p + rank) % 4)) * hidden;

  float *tokens, *send, *recv, *expert_out, *combined;
  size_t slots = (size_t)tokens_per_rank * hidden;
  cudaMalloc(&tokens, slots * sizeof(float));
  cudaMalloc(&send, slots * sizeof(float));
  cudaMalloc(&recv, slots * sizeof(float));
  cudaMalloc(&expert_out, slots * sizeof(float));
  cudaMalloc(&combined, slots * sizeof(float));
  std::vector<float> host(slots);
  for (size_t i = 0; i < slots; ++i) host[i] = (float)((i + rank) % 97) / 97.0f;
  cudaMemcpy(tokens, host.data(), slots * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);

  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaEventRecord(t0, stream);
  for (int iter = 0; iter < 10; ++iter) {
    pack_kernel<<<(tokens_per_rank * hidden + 255) / 256, 256, 0, stream>>>(tokens, send, tokens_per_rank, hidden);
    ncclGroupStart();
    for (int p = 0; p < nranks; ++p) {
      ncclSend(send + send_offsets[p], send_counts[p], ncclFloat, p, comm, stream);
      ncclRecv(recv + send_offsets[p], recv_counts[p], ncclFloat, p, comm, stream);
    }
    ncclGroupEnd();
    expert_kernel<<<(tokens_per_rank * hidden + 255) / 256, 256, 0, stream>>>(recv, expert_out, tokens_per_rank * hidden);
    ncclGroupStart();
    for (int p = 0; p < nranks; ++p) {
      ncclSend(expert_out + send_offsets[p], recv_counts[p], ncclFloat, p, comm, stream);
      ncclRecv(combined + send_offsets[p], send_counts[p], ncclFloat, p, comm, stream);
    }
    ncclGroupEnd();
  }
  cudaEventRecord(t1, stream);
  cudaEventSynchronize(t1);
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  if (rank == 0) printf("dispatch+combine: %.3f ms\n", ms / 10);
  MPI_Finalize();
  return 0;
}
