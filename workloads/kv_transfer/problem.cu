// problem.cu -- frozen problem definition of kv_transfer for the CUDA harness (its own TU).
//
// Params: L (layers), T (tokens), D (hidden size, the GEMM's K), E (K and V columns per layer, the GEMM's
// N; K = columns [0, E/2), V = [E/2, E)). Two ranks: rank 0 is the prefill rank, rank 1 the decode rank.
// Inputs (on both ranks, the same values): X (T x D), W (L x E x D). The prefill rank computes layer l's
// KV_l = X * W_l^T (T x E, bf16, fp32 accumulate) into its KV cache KV (L x T x E); the decode rank must
// end with an identical KV cache.
// Verification: rank 0's KV, layer by layer, against the fp32 reference (bf16 tolerance, NaN/Inf fail);
// rank 1's KV bit-exact against rank 0's (fetched with the harness's own ncclSend/ncclRecv).
#include "cuco_problem.h"
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstring>

enum { IN_X = 0, IN_W = 1 };

extern "C" int cuco_problem_describe(const cuco_ctx* ctx, cuco_problem* p) {
  long long L = cuco_param_get(ctx, "L", 0), T = cuco_param_get(ctx, "T", 0), D = cuco_param_get(ctx, "D", 0), E = cuco_param_get(ctx, "E", 0);
  if (ctx->nranks != 2) { snprintf(p->error, sizeof p->error, "kv_transfer runs on exactly 2 ranks (prefill, decode); got %d", ctx->nranks); return 1; }
  if (L <= 0 || L > 256 || T <= 0 || D <= 0 || E <= 0 || T % 128 || E % 128 || D % 32) {
    snprintf(p->error, sizeof p->error, "need 1 <= L <= 256, T and E multiples of 128, D a multiple of 32 (got L=%lld T=%lld D=%lld E=%lld)", L, T, D, E);
    return 1;
  }
  p->ninputs = 2; p->noutputs = 1; p->dtype = "bf16";
  p->input_names[IN_X] = "X"; p->input_bytes[IN_X] = (size_t)T * D * 2;
  p->input_names[IN_W] = "W"; p->input_bytes[IN_W] = (size_t)L * E * D * 2;
  p->output_names[0] = "KV"; p->output_bytes[0] = (size_t)L * T * E * 2;
  return 0;
}

extern "C" int cuco_problem_make_inputs(const cuco_ctx* ctx, void* const* pristine, unsigned long long seed, cudaStream_t s) {
  long long L = cuco_param_get(ctx, "L", 0), T = cuco_param_get(ctx, "T", 0), D = cuco_param_get(ctx, "D", 0), E = cuco_param_get(ctx, "E", 0);
  int rc = cuco_h_fill_bf16(pristine[IN_X], (size_t)T * D, seed, 1, 1.0f, s);
  rc |= cuco_h_fill_bf16(pristine[IN_W], (size_t)L * E * D, seed, 2, 1.0f, s);
  return rc;
}

extern "C" int cuco_problem_verify(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s,
                                   double tol, cuco_mismatch* mm) {
  long long L = cuco_param_get(ctx, "L", 0), T = cuco_param_get(ctx, "T", 0), D = cuco_param_get(ctx, "D", 0), E = cuco_param_get(ctx, "E", 0);
  const size_t layer = (size_t)T * E, total = (size_t)L * layer;
  const unsigned short* KV = (const unsigned short*)ctx->outputs[0].ptr;
  mm->found = 0;
  if (ctx->rank == 0) {
    for (long long l = 0; l < L && !mm->found; l++) {
      double e = 0, g = 0;
      long long bad = cuco_h_check_gemm_bf16(pristine[IN_X], (const unsigned short*)pristine[IN_W] + (size_t)l * E * D,
                                             KV + l * layer, (int)T, (int)E, (int)D, E, tol, 0.1 * sqrt((double)D) / 3.0, s, &e, &g);
      if (bad < -1) return 1;
      if (bad >= 0) {
        mm->found = 1; mm->index = (long long)(l * layer) + bad; mm->expected = e; mm->got = g;
        strcpy(mm->what, "compute"); strcpy(mm->buffer, "KV");
      }
    }
    if (ncclSend(KV, total * 2, ncclInt8, 1, hcomm, s) != ncclSuccess) return 1;
    if (cudaStreamSynchronize(s) != cudaSuccess) return 1;
  } else {
    void* ref = nullptr;
    if (cudaMalloc(&ref, total * 2) != cudaSuccess) return 1;
    if (ncclRecv(ref, total * 2, ncclInt8, 0, hcomm, s) != ncclSuccess) return 1;
    if (cudaStreamSynchronize(s) != cudaSuccess) return 1;
    unsigned short va = 0, vb = 0;
    long long d = cuco_h_first_diff_u16(KV, ref, total, s, &va, &vb);
    cudaFree(ref);
    if (d < -1) return 1;
    if (d >= 0) {
      unsigned int ue = (unsigned int)vb << 16, ug = (unsigned int)va << 16; float fe, fg;
      memcpy(&fe, &ue, 4); memcpy(&fg, &ug, 4);
      mm->found = 1; mm->index = d; mm->expected = fe; mm->got = fg;
      strcpy(mm->what, "transfer"); strcpy(mm->buffer, "KV");
    }
  }
  return 0;
}
