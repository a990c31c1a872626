// kv_transfer candidate: the prefill rank (0) computes L layers, KV_l = X * W_l^T (bf16, fp32 accumulate),
// into its KV cache (L x T x E); the decode rank (1) must end with the same KV cache. Only the
// EVOLVE-BLOCKs change; the harness (../_harness/cuda) calls the cuco_candidate_* functions at the bottom.
// ctx->inputs[0] = X (T x D), ctx->inputs[1] = W (L x E x D), ctx->outputs[0] = KV; all NCCL symmetric windows.
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
// Per-layer-group copy-engine transfer: the GEMMs of a group run on the main stream; when the group is
// done (an event), a high-priority stream copies it to the decode rank's cache with cudaMemcpyAsync to
// its LSA address (DMA over NVLink, no SMs), then a one-thread kernel raises the group's flag there.
// Flag window (NCCL symmetric, 4 KiB) of each rank: word 0 = "decode is ready" (on the prefill rank),
// words 64 + g = "layer group g has landed" (on the decode rank). Values are call epochs (monotonic).
struct KvPeer {
  __nv_bfloat16* kv;            // the other rank's KV cache (LSA address)
  unsigned* ready;              // word 0 of the other rank's flag window
  unsigned* landed;             // word 64 of the other rank's flag window
};
__global__ void kv_resolve_peer(ncclWindow_t kvwin, ncclWindow_t fwin, int other, KvPeer* out) {
  KvPeer p;
  p.kv = (__nv_bfloat16*)ncclGetPeerPointer(kvwin, 0, other);
  p.ready = (unsigned*)ncclGetPeerPointer(fwin, 0, other);
  p.landed = (unsigned*)ncclGetPeerPointer(fwin, 64 * sizeof(unsigned), other);
  *out = p;
}
// Decode side: say "ready" to the prefill rank, then wait (bounded) for every layer group to land. A real
// decoder would start on layer group g as soon as its flag is raised.
__global__ void kv_decode_wait(KvPeer prefill, const unsigned* my_flags, int groups, unsigned epoch,
                               unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x != 0) return;
  cuco_st_release_sys(prefill.ready, epoch);
  for (int g = 0; g < groups; g++)
    if (!cuco_wait_geq(my_flags + 64 + g, epoch, tmo, tflag)) return;
}

__global__ void kv_wait_ready(const unsigned* my_flags, unsigned epoch, unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x == 0) cuco_wait_geq(my_flags + 0, epoch, tmo, tflag);
}
__global__ void kv_raise(unsigned* flag, unsigned epoch) {
  if (threadIdx.x == 0) { __threadfence_system(); cuco_st_release_sys(flag, epoch); }
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=stream_overlap sync=layer_flags issuer=host
constexpr int kLayersPerChunk = 2;  // cuco:knob layers_per_chunk
constexpr int kCommPriority = 1;    // cuco:knob comm_priority
struct KvState {
  long long L, T, D, E;
  int lpc, groups;
  void* flags; ncclWindow_t fwin;
  KvPeer other;
  unsigned epoch;
  cudaStream_t comm;
  cudaEvent_t ev_start, ev_done, ev_group[256];
};

static int impl_setup(cuco_ctx* ctx) {
  KvState* s = new KvState();
  ctx->state = s;
  s->L = cuco_param_get(ctx, "L", 0); s->T = cuco_param_get(ctx, "T", 0); s->D = cuco_param_get(ctx, "D", 0); s->E = cuco_param_get(ctx, "E", 0);
  s->lpc = kLayersPerChunk < 1 ? 1 : (kLayersPerChunk > (int)s->L ? (int)s->L : kLayersPerChunk);
  s->groups = (int)((s->L + s->lpc - 1) / s->lpc);
  CUCO_NK(ncclMemAlloc(&s->flags, 4096));
  CUCO_CK(cudaMemset(s->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, s->flags, 4096, &s->fwin, NCCL_WIN_COLL_SYMMETRIC));
  KvPeer* d; CUCO_CK(cudaMalloc(&d, sizeof(KvPeer)));
  kv_resolve_peer<<<1, 1>>>(ctx->outputs[0].win, s->fwin, 1 - ctx->rank, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&s->other, d, sizeof(KvPeer), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&s->comm, cudaStreamNonBlocking, kCommPriority ? hi : lo));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_done, cudaEventDisableTiming));
  for (int g = 0; g < s->groups; g++) CUCO_CK(cudaEventCreateWithFlags(&s->ev_group[g], cudaEventDisableTiming));
  s->epoch = 0;
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  s->epoch++;
  if (ctx->rank == 1) {
    kv_decode_wait<<<1, 32, 0, ctx->stream>>>(s->other, (const unsigned*)s->flags, s->groups, s->epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
    CUCO_CK(cudaGetLastError());
    return 0;
  }
  const size_t layer = (size_t)s->T * s->E;
  const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
  const __nv_bfloat16* W = (const __nv_bfloat16*)ctx->inputs[1].ptr;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  CUCO_CK(cudaEventRecord(s->ev_start, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(s->comm, s->ev_start, 0));
  kv_wait_ready<<<1, 32, 0, s->comm>>>((const unsigned*)s->flags, s->epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  for (int g = 0; g < s->groups; g++) {
    long long l0 = (long long)g * s->lpc, l1 = l0 + s->lpc < s->L ? l0 + s->lpc : s->L;
    for (long long l = l0; l < l1; l++) {
      cuco_gemm::StoreEpi epi{KV + l * layer, s->E};
      CUCO_CK(cuco_gemm::launch(X, W + (size_t)l * s->E * s->D, (int)s->E, (int)s->D, s->D, s->D, 0,
                                (int)(s->T / cuco_gemm::BM), epi, ctx->stream));
    }
    CUCO_CK(cudaEventRecord(s->ev_group[g], ctx->stream));
    CUCO_CK(cudaStreamWaitEvent(s->comm, s->ev_group[g], 0));
    CUCO_CK(cudaMemcpyAsync(s->other.kv + l0 * layer, KV + l0 * layer, (size_t)(l1 - l0) * layer * 2, cudaMemcpyDeviceToDevice, s->comm));
    kv_raise<<<1, 32, 0, s->comm>>>(s->other.landed + g, s->epoch);
    CUCO_CK(cudaGetLastError());
  }
  CUCO_CK(cudaEventRecord(s->ev_done, s->comm));
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, s->ev_done, 0));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, s->fwin);
  ncclMemFree(s->flags);
  cudaStreamDestroy(s->comm);
  cudaEventDestroy(s->ev_start); cudaEventDestroy(s->ev_done);
  for (int g = 0; g < s->groups; g++) cudaEventDestroy(s->ev_group[g]);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
