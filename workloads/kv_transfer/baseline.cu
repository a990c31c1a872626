// baseline.cu -- the frozen reference implementation of kv_transfer (cuco_baseline_* symbols): the
// prefill rank (0) computes all L layers (one bf16 GEMM per layer writing KV_l), then sends the whole
// KV cache with ncclSend; the decode rank (1) receives it with ncclRecv. run_compute / run_comm are the
// two halves alone (the harness times them for the overlap bound).
#include "cuco_abi.h"
#include "cuco_gemm.cuh"
#include <cuda_bf16.h>
#include <cstdio>

namespace {
struct BaseState { long long L, T, D, E; };

int base_compute(cuco_ctx* ctx) {
  BaseState* s = (BaseState*)ctx->state;
  if (ctx->rank != 0) return 0;
  const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
  const __nv_bfloat16* W = (const __nv_bfloat16*)ctx->inputs[1].ptr;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  for (long long l = 0; l < s->L; l++) {
    cuco_gemm::StoreEpi epi{KV + (size_t)l * s->T * s->E, s->E};
    cudaError_t e = cuco_gemm::launch(X, W + (size_t)l * s->E * s->D, (int)s->E, (int)s->D, s->D, s->D, 0,
                                      (int)(s->T / cuco_gemm::BM), epi, ctx->stream);
    if (e != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "gemm: %s", cudaGetErrorString(e)); return 1; }
  }
  return 0;
}
int base_comm(cuco_ctx* ctx) {
  BaseState* s = (BaseState*)ctx->state;
  size_t bytes = (size_t)s->L * s->T * s->E * 2;
  ncclResult_t r = ctx->rank == 0 ? ncclSend(ctx->outputs[0].ptr, bytes, ncclInt8, 1, ctx->comm, ctx->stream)
                                  : ncclRecv(ctx->outputs[0].ptr, bytes, ncclInt8, 0, ctx->comm, ctx->stream);
  if (r != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "send/recv: %s", ncclGetErrorString(r)); return 1; }
  return 0;
}
}  // namespace

extern "C" int cuco_baseline_setup(cuco_ctx* ctx) {
  ctx->state = new BaseState{cuco_param_get(ctx, "L", 0), cuco_param_get(ctx, "T", 0), cuco_param_get(ctx, "D", 0), cuco_param_get(ctx, "E", 0)};
  return 0;
}
extern "C" int cuco_baseline_run(cuco_ctx* ctx) { return base_compute(ctx) || base_comm(ctx); }
extern "C" int cuco_baseline_run_compute(cuco_ctx* ctx) { return base_compute(ctx); }
extern "C" int cuco_baseline_run_comm(cuco_ctx* ctx) { return base_comm(ctx); }
extern "C" int cuco_baseline_teardown(cuco_ctx* ctx) { delete (BaseState*)ctx->state; ctx->state = nullptr; return 0; }
