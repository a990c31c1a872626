// BAD CANDIDATE (test): reaches the denied cuCtxSetCurrent by name through a driver entry point; the symbol policy must refuse it.
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
// Device code of this candidate. The seed uses the shared tensor-core GEMM (cuco_gemm.cuh) with its
// plain epilogue and needs no kernel of its own.
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=host_nccl placement=sequential sync=stream issuer=host
// A denied driver function reached by name: cuCtxSetCurrent through the pointer
// cudaGetDriverEntryPointByVersion hands out (the pattern cuda* admits the lookup). With it a helper thread
// can be made current on the rank's context; here it is called on the rank's own context, and the work is
// the seed's.
struct GaState { long long M, N, K; };

static int impl_setup(cuco_ctx* ctx) {
  GaState* s = new GaState{cuco_param_get(ctx, "M", 0), cuco_param_get(ctx, "N", 0), cuco_param_get(ctx, "K", 0)};
  ctx->state = s;
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CUCO_CK(cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &fn, 12000, cudaEnableDefault, &q));
  void* get = nullptr;  // the current context through the same lookup: the job links no driver library
  CUCO_CK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, &q));
  CUcontext cur = nullptr;
  if (fn && get && ((CUresult (*)(CUcontext*))get)(&cur) == CUDA_SUCCESS) ((CUresult (*)(CUcontext))fn)(cur);
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  const size_t blk = (size_t)s->M * s->N;
  __nv_bfloat16* C = (__nv_bfloat16*)ctx->outputs[0].ptr;
  cuco_gemm::StoreEpi epi{C + (size_t)ctx->rank * blk, s->N};
  CUCO_CK(cuco_gemm::launch((const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr,
                            (int)s->N, (int)s->K, s->K, s->K, 0, (int)(s->M / cuco_gemm::BM), epi, ctx->stream));
  CUCO_NK(ncclAllGather(C + (size_t)ctx->rank * blk, C, blk, ncclBfloat16, ctx->comm, ctx->stream));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  delete (GaState*)ctx->state;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
