// attention_allgather candidate: context-parallel attention. Rank r holds positions [r*S/n, (r+1)*S/n)
// of the sequence (its Q, K, V); it must compute O = softmax(Q K^T / sqrt(128)) V of its queries over the
// whole sequence's keys (GQA: HQ query heads share HKV K/V heads; causal configs mask later keys).
// Only the EVOLVE-BLOCKs change; the harness (../_harness/cuda) calls the cuco_candidate_* functions at
// the bottom. attn_flash.cuh (frozen) holds the flash-style kernel any candidate may use.
// ctx->inputs: Q (S/n x HQ x 128), K, V (S/n x HKV x 128); ctx->outputs: O (S/n x HQ x 128); bf16, all
// NCCL symmetric windows.
#include "cuco_abi.h"
#include "cuco_device.cuh"
#include "cuco_gemm.cuh"
#include "attn_flash.cuh"
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <nccl.h>
#include <nccl_device.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CUCO_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CUCO_NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, ncclGetErrorString(r_)); return 1; } } while (0)

static attn::Shape attn_shape(const cuco_ctx* ctx) {
  return attn::Shape{cuco_param_get(ctx, "S", 0), cuco_param_get(ctx, "HQ", 32), cuco_param_get(ctx, "HKV", 8),
                     cuco_param_get(ctx, "causal", 0), ctx->nranks, ctx->rank};
}

// EVOLVE-BLOCK-START kernels
// Device-initiated pass-KV over LSA: every rank pushes its K and V block into each peer's full-sequence
// buffers (symmetric windows) with a push kernel of a few CTAs on a high-priority stream, and raises that
// peer's per-block counter (each CTA adds 1 when its share has landed). The attention kernel starts on
// the local block at once and waits (bounded) on each remote block's counter before loading it: one
// online softmax over all blocks, so no merge. Before pushing, a rank waits for the peer's "ready" for
// this call (its previous call is done reading the buffers).
// Per-head-group chunking (knob head_groups): the push goes KV-head group by group (group-major, so every
// peer gets group 0 first) with one counter per (block, group), and a CTA waits only for its head's group.
// Flag window of each rank (4 KiB): word src = "src is ready for this call", word 64 + src * groups + g =
// CTAs of src's push of head group g that have landed here. Values are call epochs (monotonic; landed
// counts epoch * push CTAs).
struct AttnPeers {
  __nv_bfloat16* kall[attn::kMaxBlocks];
  __nv_bfloat16* vall[attn::kMaxBlocks];
  unsigned* flags[attn::kMaxBlocks];
};
__global__ void lsa_resolve(ncclWindow_t kwin, ncclWindow_t vwin, ncclWindow_t fwin, int n, AttnPeers* out) {
  for (int p = 0; p < n; p++) {
    out->kall[p] = (__nv_bfloat16*)ncclGetPeerPointer(kwin, 0, p);
    out->vall[p] = (__nv_bfloat16*)ncclGetPeerPointer(vwin, 0, p);
    out->flags[p] = (unsigned*)ncclGetPeerPointer(fwin, 0, p);
  }
}
__global__ void lsa_ready(AttnPeers peers, int me, int n, unsigned epoch) {
  int p = threadIdx.x;
  if (p < n && p != me) cuco_st_release_sys(peers.flags[p] + me, epoch);
}
// k, v: this rank's block, tokens x (groups x gvec) int4 vectors.
__global__ void __launch_bounds__(512) lsa_push(AttnPeers peers, const int4* __restrict__ k, const int4* __restrict__ v,
                                                long long tokens, int groups, int gvec, int me, int n, int causal,
                                                const unsigned* my_flags, unsigned epoch, unsigned long long tmo,
                                                unsigned* tflag) {
  const long long row = (long long)groups * gvec, vecs = tokens * gvec;
  for (int g = 0; g < groups; g++)
    for (int s = 1; s < n; s++) {
      const int p = (me + s) % n;
      if (causal && me > p) continue;      // p's queries all come before our keys
      if (g == 0 && threadIdx.x == 0) cuco_wait_geq(my_flags + p, epoch, tmo, tflag);
      __syncthreads();
      int4* dk = reinterpret_cast<int4*>(peers.kall[p]) + me * tokens * row;
      int4* dv = reinterpret_cast<int4*>(peers.vall[p]) + me * tokens * row;
      for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < vecs; i += (long long)gridDim.x * blockDim.x) {
        const long long o = (i / gvec) * row + (long long)g * gvec + i % gvec;
        int4 a = k[o], b = v[o];
        dk[o] = a; dv[o] = b;
      }
      __threadfence_system();
      __syncthreads();
      if (threadIdx.x == 0) cuco_atomic_add_release_sys(peers.flags[p] + 64 + me * groups + g, 1u);
    }
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=lsa placement=fused merge=single_pass issuer=kernel
constexpr int kPushCtas = 16;  // cuco:knob push_ctas
constexpr int kHeadGroups = 2;  // cuco:knob head_groups
struct AttnState {
  attn::Shape s;
  void *kall, *vall, *flags;
  ncclWindow_t kwin, vwin, fwin;
  AttnPeers peers;
  unsigned epoch;
  cudaStream_t comm;
  cudaEvent_t ev_start, ev_done;
};

static int impl_setup(cuco_ctx* ctx) {
  AttnState* st = new AttnState();
  ctx->state = st;
  attn::Shape& s = st->s;
  s = attn_shape(ctx);
  const size_t bytes = (size_t)s.kv_elems() * s.n * 2;
  CUCO_NK(ncclMemAlloc(&st->kall, bytes));
  CUCO_NK(ncclMemAlloc(&st->vall, bytes));
  CUCO_NK(ncclMemAlloc(&st->flags, 4096));
  CUCO_CK(cudaMemset(st->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->kall, bytes, &st->kwin, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->vall, bytes, &st->vwin, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->flags, 4096, &st->fwin, NCCL_WIN_COLL_SYMMETRIC));
  AttnPeers* d;
  CUCO_CK(cudaMalloc(&d, sizeof(AttnPeers)));
  lsa_resolve<<<1, 1>>>(st->kwin, st->vwin, st->fwin, s.n, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&st->peers, d, sizeof(AttnPeers), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  st->epoch = 0;
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&st->comm, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_done, cudaEventDisableTiming));
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  const attn::Shape& s = st->s;
  const long long kv = s.kv_elems();
  const unsigned epoch = ++st->epoch;
  const int ctas = kPushCtas < 1 ? 1 : kPushCtas;
  const int groups = kHeadGroups >= 1 && s.HKV % kHeadGroups == 0 ? kHeadGroups : 1;
  lsa_ready<<<1, 32, 0, ctx->stream>>>(st->peers, s.rank, s.n, epoch);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaEventRecord(st->ev_start, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(st->comm, st->ev_start, 0));
  if (s.n > 1) {
    lsa_push<<<ctas, 512, 0, st->comm>>>(st->peers, (const int4*)ctx->inputs[1].ptr, (const int4*)ctx->inputs[2].ptr,
                                        s.S_loc(), groups, (int)(s.HKV / groups * attn::D / 8), s.rank, s.n,
                                        (int)s.causal, (const unsigned*)st->flags, epoch, ctx->spin_timeout_ns,
                                        ctx->timeout_flag);
    CUCO_CK(cudaGetLastError());
  }
  CUCO_CK(cudaEventRecord(st->ev_done, st->comm));
  attn::KvList list{};
  list.b[list.n++] = attn::KvBlock{(const __nv_bfloat16*)ctx->inputs[1].ptr, (const __nv_bfloat16*)ctx->inputs[2].ptr,
                                   (int)(s.rank * s.S_loc()), (int)s.S_loc(), nullptr, 0u, 0};
  for (int k = 1; k < s.n; k++) {
    int j = (s.rank - k + s.n) % s.n;
    if (s.causal && j > s.rank) continue;
    attn::KvBlock b = attn::gathered_block(s, (const __nv_bfloat16*)st->kall, (const __nv_bfloat16*)st->vall, j);
    b.flag = (const unsigned*)st->flags + 64 + j * groups;
    b.target = epoch * (unsigned)ctas;
    b.heads_per_flag = (int)(s.HQ / groups);
    list.b[list.n++] = b;
  }
  attn::Args a = attn::args_for(s, (const __nv_bfloat16*)ctx->inputs[0].ptr, (__nv_bfloat16*)ctx->outputs[0].ptr,
                                ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(attn::launch(a, list, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, st->ev_done, 0));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, st->kwin);
  ncclCommWindowDeregister(ctx->comm, st->vwin);
  ncclCommWindowDeregister(ctx->comm, st->fwin);
  ncclMemFree(st->kall); ncclMemFree(st->vall); ncclMemFree(st->flags);
  cudaStreamDestroy(st->comm);
  cudaEventDestroy(st->ev_start); cudaEventDestroy(st->ev_done);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
