// baseline.cu -- the frozen reference implementation of gemm_allgather (its own translation unit, the
// cuco_baseline_* symbols): the host-driven program the search starts from. One stream: the bf16 GEMM
// C_r = A * B_r^T into this rank's block of C, then ncclAllGather (in place) of the blocks.
// run_compute / run_comm are the two halves alone: the harness times them for the overlap bound.
#include "cuco_abi.h"
#include "cuco_gemm.cuh"
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>

namespace {
struct BaseState { long long M, N, K; };

int base_compute(cuco_ctx* ctx) {
  BaseState* s = (BaseState*)ctx->state;
  __nv_bfloat16* C = (__nv_bfloat16*)ctx->outputs[0].ptr + (size_t)ctx->rank * s->M * s->N;
  cuco_gemm::StoreEpi epi{C, s->N};
  cudaError_t e = cuco_gemm::launch((const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr,
                                    (int)s->N, (int)s->K, s->K, s->K, 0, (int)(s->M / cuco_gemm::BM), epi, ctx->stream);
  if (e != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "gemm: %s", cudaGetErrorString(e)); return 1; }
  return 0;
}
int base_comm(cuco_ctx* ctx) {
  BaseState* s = (BaseState*)ctx->state;
  size_t blk = (size_t)s->M * s->N;
  __nv_bfloat16* C = (__nv_bfloat16*)ctx->outputs[0].ptr;
  ncclResult_t r = ncclAllGather(C + (size_t)ctx->rank * blk, C, blk, ncclBfloat16, ctx->comm, ctx->stream);
  if (r != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "ncclAllGather: %s", ncclGetErrorString(r)); return 1; }
  return 0;
}
}  // namespace

extern "C" int cuco_baseline_setup(cuco_ctx* ctx) {
  BaseState* s = new BaseState{cuco_param_get(ctx, "M", 0), cuco_param_get(ctx, "N", 0), cuco_param_get(ctx, "K", 0)};
  ctx->state = s;
  return 0;
}
extern "C" int cuco_baseline_run(cuco_ctx* ctx) { return base_compute(ctx) || base_comm(ctx); }
extern "C" int cuco_baseline_run_compute(cuco_ctx* ctx) { return base_compute(ctx); }
extern "C" int cuco_baseline_run_comm(cuco_ctx* ctx) { return base_comm(ctx); }
extern "C" int cuco_baseline_teardown(cuco_ctx* ctx) { delete (BaseState*)ctx->state; ctx->state = nullptr; return 0; }
