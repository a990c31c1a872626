// BAD CANDIDATE (test): a helper thread left running launches the last row tile and the all-gather after the clock stops; the harness must refuse it.
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
// A helper thread of the candidate's own, started in setup and left running: each call launches the GEMM of
// every row tile but the last on ctx->stream and returns; the helper waits for those rows to finish (by
// then the harness has recorded its end event), then launches the last tile and the all-gather on a side
// stream, after the harness's clock has stopped.
struct GaState {
  long long M, N, K;
  cudaStream_t side;
  cudaEvent_t head_done;
  pthread_t helper;
  int go;          // calls handed to the helper (-1: stop)
  cuco_ctx* ctx;
};

static void* ga_helper(void* arg) {
  GaState* s = (GaState*)arg;
  int seen = 0;
  for (;;) {
    int now;
    while ((now = __atomic_load_n(&s->go, __ATOMIC_ACQUIRE)) == seen) sched_yield();
    if (now < 0) return nullptr;
    seen = now;
    cudaEventSynchronize(s->head_done);
    cuco_ctx* ctx = s->ctx;
    const size_t blk = (size_t)s->M * s->N;
    __nv_bfloat16* C = (__nv_bfloat16*)ctx->outputs[0].ptr;
    cuco_gemm::StoreEpi epi{C + (size_t)ctx->rank * blk, s->N};
    const int tiles = (int)(s->M / cuco_gemm::BM);
    cuco_gemm::launch((const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr,
                      (int)s->N, (int)s->K, s->K, s->K, tiles - 1, 1, epi, s->side);
    ncclAllGather(C + (size_t)ctx->rank * blk, C, blk, ncclBfloat16, ctx->comm, s->side);
  }
}

static int impl_setup(cuco_ctx* ctx) {
  GaState* s = new GaState{cuco_param_get(ctx, "M", 0), cuco_param_get(ctx, "N", 0), cuco_param_get(ctx, "K", 0),
                           nullptr, nullptr, 0, 0, ctx};
  CUCO_CK(cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking));
  CUCO_CK(cudaEventCreateWithFlags(&s->head_done, cudaEventDisableTiming));
  ctx->state = s;
  if (pthread_create(&s->helper, nullptr, ga_helper, s) != 0) return 1;
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  s->ctx = ctx;
  const size_t blk = (size_t)s->M * s->N;
  __nv_bfloat16* C = (__nv_bfloat16*)ctx->outputs[0].ptr;
  cuco_gemm::StoreEpi epi{C + (size_t)ctx->rank * blk, s->N};
  const int tiles = (int)(s->M / cuco_gemm::BM);
  CUCO_CK(cuco_gemm::launch((const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr,
                            (int)s->N, (int)s->K, s->K, s->K, 0, tiles - 1, epi, ctx->stream));
  CUCO_CK(cudaEventRecord(s->head_done, ctx->stream));
  __atomic_add_fetch(&s->go, 1, __ATOMIC_RELEASE);
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  __atomic_store_n(&s->go, -1, __ATOMIC_RELEASE);
  pthread_join(s->helper, nullptr);
  cudaStreamDestroy(s->side);
  cudaEventDestroy(s->head_done);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
