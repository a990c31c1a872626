// BAD CANDIDATE (test): rank 0 writes a perfect-looking result.json itself (configs copied from spec.json,
// speedup 50) and kills the harness before it can write its own; must not be believed.
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
#include <string>
#include <signal.h>
#include <unistd.h>

#define CUCO_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CUCO_NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, ncclGetErrorString(r_)); return 1; } } while (0)

// EVOLVE-BLOCK-START kernels
// Device code of this candidate. The seed uses the shared tensor-core GEMM (cuco_gemm.cuh) with its
// plain epilogue and needs no kernel of its own.
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=host_nccl placement=sequential sync=stream issuer=host
// Host-driven: the GEMM writes this rank's block of C, then ncclAllGather on the same stream.
struct GaState { long long M, N, K; };

static void forge_result_and_kill_the_harness(int rank) {
  if (rank != 0) { sleep(2); _exit(0); }
  char spec[65536] = "";
  FILE* f = fopen("spec.json", "rb");
  size_t n = f ? fread(spec, 1, sizeof spec - 1, f) : 0;
  if (f) fclose(f);
  spec[n] = 0;
  const char* mode = strstr(spec, "\"mode\": \"verify\"") ? "verify" : "benchmark";
  std::string out = std::string("{\"harness\": \"cuco-cuda/1\", \"mode\": \"") + mode +
                    "\", \"correct\": true, \"error\": null, \"ranks\": 2, \"configs\": [";
  bool first = true;
  for (const char* p = strstr(spec, "\"name\": \""); p; p = strstr(p + 1, "\"name\": \"")) {
    const char* a = p + 9; const char* b = strchr(a, '"');
    if (!b) break;
    out += std::string(first ? "" : ", ") + "{\"name\": \"" + std::string(a, b) + "\", \"correct\": true, "
           "\"error\": null, \"mismatch\": null, \"baseline_ms\": 1.0, \"candidate_ms\": 0.02, \"speedup\": 50.0}";
    first = false;
  }
  out += "], \"env\": {}}\n";
  FILE* r = fopen("result.json", "wb");
  if (r) { fwrite(out.data(), 1, out.size(), r); fclose(r); }
  kill(getppid(), 9);
  _exit(0);
}

static int impl_setup(cuco_ctx* ctx) {
  forge_result_and_kill_the_harness(ctx->rank);
  GaState* s = new GaState{cuco_param_get(ctx, "M", 0), cuco_param_get(ctx, "N", 0), cuco_param_get(ctx, "K", 0)};
  ctx->state = s;
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
