// problem.cu -- frozen problem definition of gemm_allgather for the CUDA harness (its own TU).
//
// Params: M, N (columns per rank, N_loc), K; optional `ranks` (the config applies only to jobs of that
// many ranks). Every rank r holds A (M x K, the same on all ranks) and B_r (N x K, its own), computes
// C_r = A * B_r^T (bf16 out, fp32 accumulate) and all-gathers: output C is nranks blocks of M x N,
// block q = C_q, identical on every rank.
// Verification on rank r: block r against an fp32 reference (bf16 tolerance, NaN/Inf fail); every other
// block q bit-exact against block q of rank q (fetched by the harness's own ncclAllGather).
// The verification stage's calls use an fp32 reference made with plain FMAs (cuco_h_check_gemm_bf16);
// the benchmark loop's calls (every one of them: warm-ups and timed calls) use cuco_problem_verify_call,
// the same checks with the reference made by the harness's own tensor-core GEMM (fp32 accumulate; the
// frozen baseline's GEMM, itself checked against the FMA reference on every config): the FMA reference
// of an 8192 x 4096 x 8192 block took ~30 ms per call, a quarter of a benchmark job's wall time.
#include "cuco_problem.h"
#include "cuco_gemm.cuh"
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstring>

enum { IN_A = 0, IN_B = 1 };

extern "C" int cuco_problem_describe(const cuco_ctx* ctx, cuco_problem* p) {
  long long M = cuco_param_get(ctx, "M", 0), N = cuco_param_get(ctx, "N", 0), K = cuco_param_get(ctx, "K", 0);
  if (M <= 0 || N <= 0 || K <= 0 || M % 128 || N % 128 || K % 32) {
    snprintf(p->error, sizeof p->error, "need M, N multiples of 128 and K a multiple of 32 (got M=%lld N=%lld K=%lld)", M, N, K);
    return 1;
  }
  p->ninputs = 2; p->noutputs = 1; p->dtype = "bf16";
  p->input_names[IN_A] = "A"; p->input_bytes[IN_A] = (size_t)M * K * 2;
  p->input_names[IN_B] = "B"; p->input_bytes[IN_B] = (size_t)N * K * 2;
  p->output_names[0] = "C"; p->output_bytes[0] = (size_t)ctx->nranks * M * N * 2;
  return 0;
}

extern "C" int cuco_problem_make_inputs(const cuco_ctx* ctx, void* const* pristine, unsigned long long seed, cudaStream_t s) {
  long long M = cuco_param_get(ctx, "M", 0), N = cuco_param_get(ctx, "N", 0), K = cuco_param_get(ctx, "K", 0);
  int rc = cuco_h_fill_bf16(pristine[IN_A], (size_t)M * K, seed, 1, 1.0f, s);           // same A on every rank
  rc |= cuco_h_fill_bf16(pristine[IN_B], (size_t)N * K, seed, 100 + ctx->rank, 1.0f, s);  // B_r per rank
  return rc;
}

namespace {

CucoKeptBuffer g_ref, g_own, g_all, g_first;

// First element of got (bf16) outside |got - ref| <= tol * (|ref| + scale) against ref (bf16), NaN/Inf fail.
__global__ void k_first_bad_vs_ref(const __nv_bfloat16* __restrict__ got, const __nv_bfloat16* __restrict__ ref,
                                   size_t n, float tol, float scale, unsigned long long* __restrict__ first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = __bfloat162float(got[i]), r = __bfloat162float(ref[i]);
    if (!(fabsf(g - r) <= tol * (fabsf(r) + scale))) atomicMin(first, (unsigned long long)i);
  }
}

// Block r of C against the tensor-core reference of the pristine inputs: the first bad index, -1, or -2.
long long check_own_block(const void* A, const void* B, const unsigned short* C, long long M, long long N,
                          long long K, double tol, double scale, cudaStream_t s, double* e, double* g) {
  auto* ref = (__nv_bfloat16*)g_ref.at_least((size_t)M * N * 2);
  auto* first = (unsigned long long*)g_first.at_least(8);
  if (!ref || !first) return -2;
  cuco_gemm::StoreEpi epi{ref, N};
  if (cuco_gemm::launch((const __nv_bfloat16*)A, (const __nv_bfloat16*)B, (int)N, (int)K, K, K, 0,
                        (int)(M / cuco_gemm::BM), epi, s) != cudaSuccess)
    return -2;
  unsigned long long init = ~0ULL, bad = 0;
  cudaMemcpyAsync(first, &init, 8, cudaMemcpyHostToDevice, s);
  k_first_bad_vs_ref<<<1024, 256, 0, s>>>((const __nv_bfloat16*)C, ref, (size_t)M * N, (float)tol, (float)scale, first);
  cudaMemcpyAsync(&bad, first, 8, cudaMemcpyDeviceToHost, s);
  if (cudaStreamSynchronize(s) != cudaSuccess) return -2;
  if (bad == ~0ULL) return -1;
  __nv_bfloat16 gv, rv;
  cudaMemcpy(&gv, (const __nv_bfloat16*)C + bad, 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(&rv, ref + bad, 2, cudaMemcpyDeviceToHost);
  *e = __bfloat162float(rv); *g = __bfloat162float(gv);
  return (long long)bad;
}

// The checks of one call; `fast`: the compute check's reference from the tensor-core GEMM.
int verify(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s, double tol,
           cuco_mismatch* mm, bool fast) {
  long long M = cuco_param_get(ctx, "M", 0), N = cuco_param_get(ctx, "N", 0), K = cuco_param_get(ctx, "K", 0);
  const size_t blk = (size_t)M * N;  // elements per rank block
  const unsigned short* C = (const unsigned short*)ctx->outputs[0].ptr;
  mm->found = 0;
  // 1. own block: compute, against the fp32 reference of the pristine inputs
  double e = 0, g = 0;
  const double scale = 0.1 * sqrt((double)K) / 3.0;   // 10% of the rms of C
  long long bad = fast ? check_own_block(pristine[IN_A], pristine[IN_B], C + (size_t)ctx->rank * blk, M, N, K, tol,
                                         scale, s, &e, &g)
                       : cuco_h_check_gemm_bf16(pristine[IN_A], pristine[IN_B], C + (size_t)ctx->rank * blk,
                                                (int)M, (int)N, (int)K, N, tol, scale, s, &e, &g);
  if (bad < -1) return 1;
  if (bad >= 0) {
    mm->found = 1; mm->index = (long long)ctx->rank * blk + bad; mm->expected = e; mm->got = g;
    strcpy(mm->what, "compute"); strcpy(mm->buffer, "C");
  }
  // 2. gathered blocks: bit-exact against each owner's own block (collective: every rank takes part)
  void* own = g_own.at_least(blk * 2);
  void* all = g_all.at_least(blk * 2 * ctx->nranks);
  if (!own || !all) return 1;
  cudaMemcpyAsync(own, C + (size_t)ctx->rank * blk, blk * 2, cudaMemcpyDeviceToDevice, s);
  if (ncclAllGather(own, all, blk * 2, ncclInt8, hcomm, s) != ncclSuccess) return 1;
  if (cudaStreamSynchronize(s) != cudaSuccess) return 1;
  for (int q = 0; q < ctx->nranks && !mm->found; q++) {
    if (q == ctx->rank) continue;
    unsigned short va = 0, vb = 0;
    long long d = cuco_h_first_diff_u16(C + (size_t)q * blk, (const unsigned short*)all + (size_t)q * blk, blk, s, &va, &vb);
    if (d < -1) return 1;
    if (d >= 0) {
      unsigned int ue = (unsigned int)vb << 16, ug = (unsigned int)va << 16; float fe, fg;
      memcpy(&fe, &ue, 4); memcpy(&fg, &ug, 4);
      mm->found = 1; mm->index = (long long)q * blk + d; mm->expected = fe; mm->got = fg;
      strcpy(mm->what, "gather"); strcpy(mm->buffer, "C");
    }
  }
  return 0;
}

}  // namespace

extern "C" int cuco_problem_verify(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s,
                                   double tol, cuco_mismatch* mm) {
  return verify(ctx, pristine, hcomm, s, tol, mm, false);
}

extern "C" int cuco_problem_verify_call(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s,
                                        double tol, cuco_mismatch* mm) {
  return verify(ctx, pristine, hcomm, s, tol, mm, true);
}
