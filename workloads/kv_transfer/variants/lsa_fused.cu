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
// Per-layer LSA push, fused into the GEMM: the epilogue stores each finished tile into the prefill
// rank's cache and, with 16-byte LSA stores over NVLink, into the decode rank's cache; the last tile of a
// layer group (a counter) raises that group's flag at the decode rank, which waits on it (bounded).
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

struct KvPushEpi {
  __nv_bfloat16* local; __nv_bfloat16* remote;   // this layer's KV_l, here and at the decode rank
  long long ldc;
  const unsigned* my_flags; unsigned* landed;     // landed: the decode rank's group flags
  unsigned* group_count; int group; unsigned group_target;
  unsigned epoch; unsigned long long tmo; unsigned* tflag;
  __device__ __forceinline__ void begin_epilogue(int, int) const {
    if (threadIdx.x == 0) cuco_wait_geq(my_flags + 0, epoch, tmo, tflag);  // the decode rank is ready
    __syncthreads();
  }
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    long long off = (long long)row * ldc + col;
    *reinterpret_cast<int4*>(local + off) = v;
    *reinterpret_cast<int4*>(remote + off) = v;
  }
  __device__ __forceinline__ void tile_done(int, int) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      unsigned old = atomicAdd(group_count + group, 1u);
      if (old + 1u == group_target) { __threadfence_system(); cuco_st_release_sys(landed + group, epoch); }
    }
  }
};
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=lsa placement=fused sync=layer_flags issuer=thread
constexpr int kLayersPerChunk = 1;  // cuco:knob layers_per_chunk
struct KvState {
  long long L, T, D, E;
  int lpc, groups;
  void* flags; ncclWindow_t fwin;
  unsigned* counts;
  KvPeer other;
  unsigned epoch;
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
  CUCO_CK(cudaMalloc(&s->counts, 1024 * sizeof(unsigned)));
  CUCO_CK(cudaMemset(s->counts, 0, 1024 * sizeof(unsigned)));
  KvPeer* d; CUCO_CK(cudaMalloc(&d, sizeof(KvPeer)));
  kv_resolve_peer<<<1, 1>>>(ctx->outputs[0].win, s->fwin, 1 - ctx->rank, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&s->other, d, sizeof(KvPeer), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
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
  const unsigned tiles_per_layer = (unsigned)((s->T / cuco_gemm::BM) * (s->E / cuco_gemm::BN));
  const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
  const __nv_bfloat16* W = (const __nv_bfloat16*)ctx->inputs[1].ptr;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  for (long long l = 0; l < s->L; l++) {
    int g = (int)(l / s->lpc);
    long long in_group = (g == s->groups - 1) ? s->L - (long long)g * s->lpc : s->lpc;
    KvPushEpi epi;
    epi.local = KV + l * layer; epi.remote = s->other.kv + l * layer; epi.ldc = s->E;
    epi.my_flags = (const unsigned*)s->flags; epi.landed = s->other.landed;
    epi.group_count = s->counts; epi.group = g;
    epi.group_target = s->epoch * (unsigned)(tiles_per_layer * in_group);
    epi.epoch = s->epoch; epi.tmo = ctx->spin_timeout_ns; epi.tflag = ctx->timeout_flag;
    CUCO_CK(cuco_gemm::launch(X, W + (size_t)l * s->E * s->D, (int)s->E, (int)s->D, s->D, s->D, 0,
                              (int)(s->T / cuco_gemm::BM), epi, ctx->stream));
  }
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, s->fwin);
  ncclMemFree(s->flags);
  cudaFree(s->counts);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
