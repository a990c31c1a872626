// cuco_problem.h -- the interface between the frozen harness core (harness.cu) and a workload's frozen
// problem definition (problem.cu in the workload folder, its own translation unit): which buffers a
// config needs, how its inputs are made from the harness's seed, and how every rank's outputs are
// verified. The harness owns allocation (ncclMemAlloc + symmetric windows), poisoning, timing and JSON.
#ifndef CUCO_PROBLEM_H
#define CUCO_PROBLEM_H
#include "cuco_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuco_mismatch;

typedef struct cuco_problem {
  int ninputs, noutputs;
  const char* input_names[CUCO_MAX_BUFFERS];
  size_t input_bytes[CUCO_MAX_BUFFERS];
  const char* output_names[CUCO_MAX_BUFFERS];
  size_t output_bytes[CUCO_MAX_BUFFERS];
  const char* dtype;       // tolerance key of compute outputs, e.g. "bf16"
  char error[256];         // why a config is unsupported
  // Optional (describe leaves it NULL: every check is cuco_problem_verify). The check of a benchmark
  // iteration's candidate call, where a full fp32 reference per call costs more than the call is worth:
  // the same verdict as verify on the computed outputs of a random sample (rows, heads), every output
  // element scanned for NaN / Inf, moved data still bit-exact. sample_seed is drawn by the harness from
  // the operating system's entropy after the call has returned, per rank: nothing that ran before the
  // check can know which outputs it reads. Collective over hcomm like verify.
  int (*verify_sample)(const struct cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s,
                       double tol, unsigned long long sample_seed, struct cuco_mismatch* mm);
} cuco_problem;

typedef struct cuco_mismatch {
  int found;               // 1 when this rank's output is wrong
  long long index;         // first mismatching element (linear index in the output buffer)
  double expected, got;
  char what[32];           // "compute" (tolerance vs fp32 reference) or "gather"/"transfer" (bit-exact)
  char buffer[32];         // output buffer name
} cuco_mismatch;

// Implemented by the workload's problem.cu.
// describe: sizes from ctx->params / ctx->nranks; returns non-zero (with p->error) if unsupported.
int cuco_problem_describe(const cuco_ctx* ctx, cuco_problem* p);
// make_inputs: fill this rank's pristine (harness-private) input copies from seed.
int cuco_problem_make_inputs(const cuco_ctx* ctx, void* const* pristine, unsigned long long seed, cudaStream_t s);
// verify: check ctx->outputs of this rank (collective over hcomm: every rank calls it).
// Returns 0 when checked (mm->found says whether it is wrong), non-zero on an internal error.
int cuco_problem_verify(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s,
                        double tol, cuco_mismatch* mm);
// verify_call (optional; weak): the same checks of every element, made cheaper, for the benchmark loop's
// calls (warm-ups and timed calls alike); the verification stage's calls always use verify. Without it,
// every call uses verify.
int cuco_problem_verify_call(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t s,
                             double tol, cuco_mismatch* mm) __attribute__((weak));

// Helpers implemented by the harness (harness.cu), for problem.cu.
// Uniform bf16 values in [-scale, scale) from (seed, stream_id, index).
int cuco_h_fill_bf16(void* p, size_t n, unsigned long long seed, unsigned stream_id, float scale, cudaStream_t s);
// First index where two u16 arrays differ bit-wise, or -1. Synchronises s.
long long cuco_h_first_diff_u16(const void* a, const void* b, size_t n, cudaStream_t s,
                                unsigned short* va, unsigned short* vb);
// Checks C (bf16, M x N, ldc) against the fp32 reference A (M x K) * B (N x K)^T computed on the fly
// (no expected output is ever stored): |got - ref| <= tol * (|ref| + scale), NaN/Inf fail.
// Returns the first bad linear index m * N + n (or -1) and its expected/got. Synchronises s.
long long cuco_h_check_gemm_bf16(const void* A, const void* B, const void* C, int M, int N, int K,
                                 long long ldc, double tol, double scale, cudaStream_t s,
                                 double* expected, double* got);

#ifdef __cplusplus
}

// A device buffer a problem's per-call check keeps between calls (grown when a call needs more): a
// cudaMalloc and cudaFree per call synchronise the device and cost more than the comparison itself.
struct CucoKeptBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  void* at_least(size_t n) {
    if (bytes < n) {
      if (p) cudaFree(p);
      p = nullptr; bytes = 0;
      if (cudaMalloc(&p, n) != cudaSuccess) return nullptr;
      bytes = n;
    }
    return p;
  }
};
#endif
#endif  // CUCO_PROBLEM_H
