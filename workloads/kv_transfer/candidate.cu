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
// Device code of this candidate. The seed uses the shared tensor-core GEMM (cuco_gemm.cuh) with its
// plain epilogue and needs no kernel of its own.
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=host_nccl placement=sequential sync=stream issuer=host
// Host-driven: the prefill rank computes every layer, then ncclSend of the whole cache; decode ncclRecv.
struct KvState { long long L, T, D, E; };

static int impl_setup(cuco_ctx* ctx) {
  ctx->state = new KvState{cuco_param_get(ctx, "L", 0), cuco_param_get(ctx, "T", 0), cuco_param_get(ctx, "D", 0), cuco_param_get(ctx, "E", 0)};
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  const size_t layer = (size_t)s->T * s->E;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  if (ctx->rank == 0) {
    const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
    const __nv_bfloat16* W = (const __nv_bfloat16*)ctx->inputs[1].ptr;
    for (long long l = 0; l < s->L; l++) {
      cuco_gemm::StoreEpi epi{KV + l * layer, s->E};
      CUCO_CK(cuco_gemm::launch(X, W + (size_t)l * s->E * s->D, (int)s->E, (int)s->D, s->D, s->D, 0,
                                (int)(s->T / cuco_gemm::BM), epi, ctx->stream));
    }
    CUCO_NK(ncclSend(KV, s->L * layer * 2, ncclInt8, 1, ctx->comm, ctx->stream));
  } else {
    CUCO_NK(ncclRecv(KV, s->L * layer * 2, ncclInt8, 0, ctx->comm, ctx->stream));
  }
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  delete (KvState*)ctx->state;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
