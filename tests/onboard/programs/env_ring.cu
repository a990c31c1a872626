// A launcher-style program (torchrun-like: RANK / WORLD_SIZE / LOCAL_RANK in the environment). Rank 0
// writes the NCCL unique id to a file the others poll for. Each step a stage kernel transforms the
// activations, which travel one hop around the ring with grouped ncclSend / ncclRecv, and the next
// stage consumes what arrived.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <nccl.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v ? atoi(v) : fallback;
}

static void exchange_id(ncclUniqueId* id, int rank, const char* path) {
  if (rank == 0) {
    ncclGetUniqueId(id);
    FILE* f = fopen(path, "wb");
    fwrite(id, sizeof(*id), 1, f);
    fclose(f);
  } else {
    FILE* f = nullptr;
    while ((f = fopen(path, "rb")) == nullptr) usleep(1000);
    while (fread(id, sizeof(*id), 1, f) != 1) { rewind(f); usleep(1000); }
    fclose(f);
  }
}

__global__ void stage_kernel(const __half* in, __half* act, int n, float w) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) act[i] = __float2half(__half2float(in[i]) * w + 0.5f);
}

__global__ void consume_kernel(const __half* recv, __half* next, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) next[i] = __float2half(__half2float(recv[i]) * 0.5f);
}

int main() {
  int rank = env_int("RANK", 0);
  int world = env_int("WORLD_SIZE", 1);
  int local_rank = env_int("LOCAL_RANK", 0);
  cudaSetDevice(local_rank);

  ncclUniqueId id;
  exchange_id(&id, rank, "/tmp/ring_nccl_id");
  ncclComm_t comm;
  ncclCommInitRank(&comm, world, id, rank);

  int elems = 1 << 20;
  int steps = 50;
  __half *in, *act, *recv, *next;
  cudaMalloc(&in, elems * sizeof(__half));
  cudaMalloc(&act, elems * sizeof(__half));
  cudaMalloc(&recv, elems * sizeof(__half));
  cudaMalloc(&next, elems * sizeof(__half));
  cudaMemset(in, 0, elems * sizeof(__half));
  cudaStream_t s;
  cudaStreamCreate(&s);
  int peer_next = (rank + 1) % world;
  int peer_prev = (rank - 1 + world) % world;

  for (int step = 0; step < steps; ++step) {
    stage_kernel<<<(elems + 511) / 512, 512, 0, s>>>(in, act, elems, 1.5f);
    ncclGroupStart();
    ncclSend(act, elems, ncclHalf, peer_next, comm, s);
    ncclRecv(recv, elems, ncclHalf, peer_prev, comm, s);
    ncclGroupEnd();
    consume_kernel<<<(elems + 511) / 512, 512, 0, s>>>(recv, next, elems);
  }
  cudaStreamSynchronize(s);
  printf("rank %d done\n", rank);
  ncclCommDestroy(comm);
  return 0;
}
