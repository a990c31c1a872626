// gemm_allgather candidate: each rank computes C_r = A * B_r^T (bf16, fp32 accumulate) and all ranks
// end up with C = [C_0, C_1, ...] (nranks blocks of M x N). Only the EVOLVE-BLOCKs change; the harness
// (../_harness/cuda) calls the three cuco_candidate_* functions at the bottom. ctx->inputs[0] = A
// (M x K), ctx->inputs[1] = B_r (N x K), ctx->outputs[0] = C; all are NCCL symmetric windows.
#include "cuco_abi.h"
#include "cuco_device.cuh"
#include "cuco_gemm.cuh"
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <nccl.h>
#include <nccl_device.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CUCO_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CUCO_NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, ncclGetErrorString(r_)); return 1; } } while (0)

// EVOLVE-BLOCK-START kernels
// Copy engine: the GEMM runs in row chunks on the main stream; as each chunk finishes (an event), a
// second, high-priority stream copies it to every peer's C with cudaMemcpyAsync to the peer's LSA
// address (the DMA engines move it over NVLink, no SMs used). A one-thread kernel exchanges "ready"
// flags before the first copy and "done" flags after the last (bounded waits).
// Peers of this rank, in staggered order (rank+1, rank+2, ...), resolved once in setup from the NCCL
// windows (LSA pointers are plain device addresses in this process).
struct GaPeers {
  int n;                        // number of peers (nranks - 1), at most 7
  int rank[7];
  __nv_bfloat16* c_blk[7];      // this rank's block inside the peer's C
  unsigned* start_slot[7];      // this rank's "ready" word in the peer's flag window
  unsigned* end_slot[7];        // this rank's "done" word in the peer's flag window
};
constexpr int kFlagStride = 64;  // flag window: [slot][rank] words, slot 0 = ready, slot 1 = done

__global__ void ga_resolve_peers(ncclWindow_t cwin, ncclWindow_t fwin, int me, int nranks, size_t blk_bytes, GaPeers* out) {
  GaPeers p; p.n = nranks - 1;
  for (int k = 1; k < nranks; k++) {
    int q = (me + k) % nranks;
    p.rank[k - 1] = q;
    p.c_blk[k - 1] = (__nv_bfloat16*)ncclGetPeerPointer(cwin, (size_t)me * blk_bytes, q);
    p.start_slot[k - 1] = (unsigned*)ncclGetPeerPointer(fwin, (0 * kFlagStride + me) * sizeof(unsigned), q);
    p.end_slot[k - 1] = (unsigned*)ncclGetPeerPointer(fwin, (1 * kFlagStride + me) * sizeof(unsigned), q);
  }
  *out = p;
}

// One thread: tell every peer "epoch reached" in `slot`, then wait (bounded) until every peer said so.
__device__ __forceinline__ void ga_flag_exchange(const GaPeers& P, unsigned* const* peer_slot, const unsigned* my_flags,
                                                 int slot, unsigned epoch, unsigned long long tmo, unsigned* tflag) {
  __threadfence_system();
  for (int k = 0; k < P.n; k++) cuco_st_release_sys(peer_slot[k], epoch);
  for (int k = 0; k < P.n; k++) cuco_wait_geq(my_flags + slot * kFlagStride + P.rank[k], epoch, tmo, tflag);
}

__global__ void ga_flag_barrier(GaPeers P, const unsigned* my_flags, int slot, unsigned epoch,
                                unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x == 0) ga_flag_exchange(P, slot == 0 ? P.start_slot : P.end_slot, my_flags, slot, epoch, tmo, tflag);
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=stream_overlap sync=chunk_flags issuer=host
constexpr int kChunks = 4;        // cuco:knob chunks
constexpr int kCommPriority = 1;  // cuco:knob comm_priority
struct GaState {
  long long M, N, K;
  int chunks;
  void* flags; ncclWindow_t fwin;
  GaPeers peers;
  unsigned epoch;
  cudaStream_t comm;
  cudaEvent_t ev_start, ev_done, ev_chunk[64];
};

static int impl_setup(cuco_ctx* ctx) {
  GaState* s = new GaState();
  ctx->state = s;
  s->M = cuco_param_get(ctx, "M", 0); s->N = cuco_param_get(ctx, "N", 0); s->K = cuco_param_get(ctx, "K", 0);
  if (ctx->nranks > 8) { snprintf(ctx->error, sizeof ctx->error, "at most 8 ranks"); return 1; }
  int mtiles = (int)(s->M / cuco_gemm::BM);
  s->chunks = kChunks < 1 ? 1 : (kChunks > 64 ? 64 : kChunks);
  while (mtiles % s->chunks) s->chunks--;
  CUCO_NK(ncclMemAlloc(&s->flags, 4096));
  CUCO_CK(cudaMemset(s->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, s->flags, 4096, &s->fwin, NCCL_WIN_COLL_SYMMETRIC));
  GaPeers* d; CUCO_CK(cudaMalloc(&d, sizeof(GaPeers)));
  ga_resolve_peers<<<1, 1>>>(ctx->outputs[0].win, s->fwin, ctx->rank, ctx->nranks, (size_t)s->M * s->N * 2, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&s->peers, d, sizeof(GaPeers), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&s->comm, cudaStreamNonBlocking, kCommPriority ? hi : lo));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_done, cudaEventDisableTiming));
  for (int c = 0; c < s->chunks; c++) CUCO_CK(cudaEventCreateWithFlags(&s->ev_chunk[c], cudaEventDisableTiming));
  s->epoch = 0;
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  s->epoch++;
  const size_t blk = (size_t)s->M * s->N;
  const int mtiles = (int)(s->M / cuco_gemm::BM), mt_per_chunk = mtiles / s->chunks;
  const size_t chunk_elems = blk / s->chunks;
  __nv_bfloat16* local = (__nv_bfloat16*)ctx->outputs[0].ptr + (size_t)ctx->rank * blk;
  CUCO_CK(cudaEventRecord(s->ev_start, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(s->comm, s->ev_start, 0));
  ga_flag_barrier<<<1, 32, 0, s->comm>>>(s->peers, (const unsigned*)s->flags, 0, s->epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  cuco_gemm::StoreEpi epi{local, s->N};
  for (int c = 0; c < s->chunks; c++) {
    CUCO_CK(cuco_gemm::launch((const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr,
                              (int)s->N, (int)s->K, s->K, s->K, c * mt_per_chunk, mt_per_chunk, epi, ctx->stream));
    CUCO_CK(cudaEventRecord(s->ev_chunk[c], ctx->stream));
    CUCO_CK(cudaStreamWaitEvent(s->comm, s->ev_chunk[c], 0));
    for (int k = 0; k < s->peers.n; k++)
      CUCO_CK(cudaMemcpyAsync(s->peers.c_blk[k] + (size_t)c * chunk_elems, local + (size_t)c * chunk_elems,
                              chunk_elems * 2, cudaMemcpyDeviceToDevice, s->comm));
  }
  ga_flag_barrier<<<1, 32, 0, s->comm>>>(s->peers, (const unsigned*)s->flags, 1, s->epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaEventRecord(s->ev_done, s->comm));
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, s->ev_done, 0));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, s->fwin);
  ncclMemFree(s->flags);
  cudaStreamDestroy(s->comm);
  cudaEventDestroy(s->ev_start); cudaEventDestroy(s->ev_done);
  for (int c = 0; c < s->chunks; c++) cudaEventDestroy(s->ev_chunk[c]);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
