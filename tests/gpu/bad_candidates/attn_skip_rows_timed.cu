// BAD CANDIDATE (test): honest on a config's first two calls (the verification calls, checked in full), then
// skips its last 64 query rows and writes zeros there (finite, so no poison is left): must be reported as a
// compute mismatch in O by the sampled check of a benchmark call (random (row, head) pairs picked after the
// call), on its first warm-up call.
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
// Device code of this candidate. The seed uses attn_flash.cuh's kernel as it is.
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=host_nccl placement=sequential merge=single_pass issuer=host
// Host-driven: all-gather K and V (ncclAllGather) into full-sequence buffers, then one attention pass over
// every rank's block in order.
struct AttnState {
  attn::Shape s;
  __nv_bfloat16 *kall, *vall;
  int calls;
};

static int impl_setup(cuco_ctx* ctx) {
  AttnState* st = new AttnState();
  ctx->state = st;
  st->s = attn_shape(ctx);
  CUCO_CK(cudaMalloc(&st->kall, st->s.kv_elems() * st->s.n * 2));
  CUCO_CK(cudaMalloc(&st->vall, st->s.kv_elems() * st->s.n * 2));
  return 0;
}

static int attn_gather(cuco_ctx* ctx, AttnState* st) {
  CUCO_NK(ncclGroupStart());
  CUCO_NK(ncclAllGather(ctx->inputs[1].ptr, st->kall, st->s.kv_elems(), ncclBfloat16, ctx->comm, ctx->stream));
  CUCO_NK(ncclAllGather(ctx->inputs[2].ptr, st->vall, st->s.kv_elems(), ncclBfloat16, ctx->comm, ctx->stream));
  CUCO_NK(ncclGroupEnd());
  return 0;
}

static int attn_compute(cuco_ctx* ctx, AttnState* st) {
  attn::KvList kv{};
  kv.n = st->s.n;
  for (int j = 0; j < st->s.n; j++) kv.b[j] = attn::gathered_block(st->s, st->kall, st->vall, j);
  attn::Args a = attn::args_for(st->s, (const __nv_bfloat16*)ctx->inputs[0].ptr, (__nv_bfloat16*)ctx->outputs[0].ptr,
                                ctx->spin_timeout_ns, ctx->timeout_flag);
  if (++st->calls > 2) {   // past the verification calls: the last 64 rows (every head) left out, zeroed
    a.q_len -= attn::BQ;
    const size_t row = (size_t)st->s.HQ * attn::D;
    CUCO_CK(cudaMemsetAsync((__nv_bfloat16*)ctx->outputs[0].ptr + (size_t)a.q_len * row, 0, attn::BQ * row * 2, ctx->stream));
  }
  CUCO_CK(attn::launch(a, kv, ctx->stream));
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  return attn_gather(ctx, st) || attn_compute(ctx, st);
}

static int impl_teardown(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  cudaDeviceSynchronize();
  cudaFree(st->kall); cudaFree(st->vall);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
