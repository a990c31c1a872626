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
// Ring / pass-KV over the copy engines: the other ranks' K/V blocks are pulled (cudaMemcpyAsync from
// their input windows, DMA over NVLink, no SMs) on a second stream in ring order, while the main stream
// attends over the blocks already here. Each block (split into kv_split pieces) gives a partial result
// (fp32 O normalised over its keys, and its log-sum-exp); ring_merge combines them with the LSE rescale:
//   m = max_i lse_i,  O = sum_i 2^(lse_i - m) O_i / sum_i 2^(lse_i - m).
__global__ void ring_resolve(ncclWindow_t kwin, ncclWindow_t vwin, int n, const __nv_bfloat16** out) {
  for (int p = 0; p < n; p++) {
    out[2 * p] = (const __nv_bfloat16*)ncclGetPeerPointer(kwin, 0, p);
    out[2 * p + 1] = (const __nv_bfloat16*)ncclGetPeerPointer(vwin, 0, p);
  }
}
__global__ void ring_merge(const float* __restrict__ opart, const float* __restrict__ lse, int pieces,
                           long long rows_heads, __nv_bfloat16* __restrict__ O) {
  const long long rh = blockIdx.x;
  const int d = threadIdx.x;
  float m = -INFINITY;
  for (int p = 0; p < pieces; p++) m = fmaxf(m, lse[p * rows_heads + rh]);
  float num = 0.f, den = 0.f;
  for (int p = 0; p < pieces; p++) {
    float w = exp2f(lse[p * rows_heads + rh] - m);
    num += w * opart[(p * rows_heads + rh) * attn::D + d];
    den += w;
  }
  O[rh * attn::D + d] = __float2bfloat16(den > 0.f ? num / den : 0.f);
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=ring merge=lse_merge issuer=host
constexpr int kKvSplit = 2;  // cuco:knob kv_split
struct AttnState {
  attn::Shape s;
  int split, max_pieces;
  __nv_bfloat16 *kst, *vst;              // the other ranks' blocks, as they arrive ([S][HKV][128] layout)
  const __nv_bfloat16* peer[2 * attn::kMaxBlocks];   // every rank's K and V input windows (LSA addresses)
  float *opart, *lse;
  cudaStream_t comm;
  cudaEvent_t ev_start, ev_done, ev_blk[attn::kMaxBlocks];
};

static int impl_setup(cuco_ctx* ctx) {
  AttnState* st = new AttnState();
  ctx->state = st;
  attn::Shape& s = st->s;
  s = attn_shape(ctx);
  st->split = (kKvSplit >= 1 && s.S_loc() % (kKvSplit * attn::BKV) == 0) ? kKvSplit : 1;
  st->max_pieces = s.n * st->split;
  const long long rows_heads = s.S_loc() * s.HQ;
  CUCO_CK(cudaMalloc(&st->kst, s.kv_elems() * s.n * 2));
  CUCO_CK(cudaMalloc(&st->vst, s.kv_elems() * s.n * 2));
  CUCO_CK(cudaMalloc(&st->opart, st->max_pieces * rows_heads * attn::D * 4));
  CUCO_CK(cudaMalloc(&st->lse, st->max_pieces * rows_heads * 4));
  const __nv_bfloat16** d;
  CUCO_CK(cudaMalloc(&d, sizeof st->peer));
  ring_resolve<<<1, 1>>>(ctx->inputs[1].win, ctx->inputs[2].win, s.n, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(st->peer, d, 2 * s.n * sizeof(void*), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&st->comm, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_done, cudaEventDisableTiming));
  for (int j = 0; j < s.n; j++) CUCO_CK(cudaEventCreateWithFlags(&st->ev_blk[j], cudaEventDisableTiming));
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  const attn::Shape& s = st->s;
  const long long kv = s.kv_elems(), rows_heads = s.S_loc() * s.HQ, sub = s.S_loc() / st->split;
  CUCO_CK(cudaEventRecord(st->ev_start, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(st->comm, st->ev_start, 0));
  for (int k = 1; k < s.n; k++) {          // pull in ring order: the previous rank's block first
    int j = (s.rank - k + s.n) % s.n;
    if (s.causal && j > s.rank) continue;  // all of its keys come after all of our queries
    CUCO_CK(cudaMemcpyAsync(st->kst + j * kv, st->peer[2 * j], kv * 2, cudaMemcpyDeviceToDevice, st->comm));
    CUCO_CK(cudaMemcpyAsync(st->vst + j * kv, st->peer[2 * j + 1], kv * 2, cudaMemcpyDeviceToDevice, st->comm));
    CUCO_CK(cudaEventRecord(st->ev_blk[j], st->comm));
  }
  CUCO_CK(cudaEventRecord(st->ev_done, st->comm));
  int pieces = 0;
  for (int k = 0; k < s.n; k++) {
    int j = (s.rank - k + s.n) % s.n;
    if (s.causal && j > s.rank) continue;
    const __nv_bfloat16* kb = j == s.rank ? (const __nv_bfloat16*)ctx->inputs[1].ptr : st->kst + j * kv;
    const __nv_bfloat16* vb = j == s.rank ? (const __nv_bfloat16*)ctx->inputs[2].ptr : st->vst + j * kv;
    if (j != s.rank) CUCO_CK(cudaStreamWaitEvent(ctx->stream, st->ev_blk[j], 0));
    for (int c = 0; c < st->split; c++) {
      attn::KvList list{};
      list.n = 1;
      list.b[0] = attn::KvBlock{kb + c * sub * s.HKV * attn::D, vb + c * sub * s.HKV * attn::D,
                                (int)(j * s.S_loc() + c * sub), (int)sub, nullptr, 0u, 0};
      attn::Args a = attn::args_for(s, (const __nv_bfloat16*)ctx->inputs[0].ptr, nullptr, ctx->spin_timeout_ns, ctx->timeout_flag);
      a.o_part = st->opart + pieces * rows_heads * attn::D;
      a.lse = st->lse + pieces * rows_heads;
      CUCO_CK(attn::launch(a, list, ctx->stream));
      pieces++;
    }
  }
  ring_merge<<<(unsigned)rows_heads, attn::D, 0, ctx->stream>>>(st->opart, st->lse, pieces, rows_heads,
                                                               (__nv_bfloat16*)ctx->outputs[0].ptr);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, st->ev_done, 0));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  cudaDeviceSynchronize();
  cudaFree(st->kst); cudaFree(st->vst); cudaFree(st->opart); cudaFree(st->lse);
  cudaStreamDestroy(st->comm);
  cudaEventDestroy(st->ev_start); cudaEventDestroy(st->ev_done);
  for (int j = 0; j < st->s.n; j++) cudaEventDestroy(st->ev_blk[j]);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
