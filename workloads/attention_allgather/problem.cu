// problem.cu -- frozen problem definition of attention_allgather for the CUDA harness (its own TU).
//
// Context parallel attention: params S (sequence length, split evenly over the ranks: rank r holds
// positions [r*S/n, (r+1)*S/n)), HQ query heads, HKV key/value heads (GQA; head dim 128), causal (0/1).
// Inputs of a rank: its block's Q (S/n x HQ x 128), K and V (S/n x HKV x 128), bf16, from the seed
// (stream ids 5000+r, 6000+r, 7000+r; Q and K in [-2, 2) so the softmax is peaked enough that a wrong
// merge of partial results shows). Output: O (S/n x HQ x 128, bf16) = softmax(Q K^T / sqrt(128)) V over
// the whole sequence's keys (causal: keys at positions <= the query's).
// Verification: the full K and V are gathered on the harness's own communicator and O is checked against
// an fp32 reference computed here (scores, exact softmax, weighted sum in fp32): bf16 tolerance relative to
// |O| plus the magnitude of its terms, sqrt(sum_j (p_j v_j)^2) / sum_j p_j (cuco_check.cuh): O is a sum that
// cancels (a query over few keys sums terms near 0.5 to about 0.01), and a bf16 P moves it by about 2^-9
// of the terms, not of O.
#include "cuco_problem.h"
#include "cuco_check.cuh"
#include "attn_flash.cuh"
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstring>

enum { IN_Q = 0, IN_K = 1, IN_V = 2 };

static attn::Shape shape_of(const cuco_ctx* ctx) {
  return attn::Shape{cuco_param_get(ctx, "S", 0), cuco_param_get(ctx, "HQ", 32), cuco_param_get(ctx, "HKV", 8),
                     cuco_param_get(ctx, "causal", 0), ctx->nranks, ctx->rank};
}

extern "C" int cuco_problem_describe(const cuco_ctx* ctx, cuco_problem* p) {
  attn::Shape s = shape_of(ctx);
  if (cuco_param_get(ctx, "D", attn::D) != attn::D || !attn::shape_ok(s)) {
    snprintf(p->error, sizeof p->error, "need D = 128, S a multiple of 64 * ranks (ranks <= 16), HQ a multiple of HKV "
             "(HQ <= 128), causal 0 or 1 (got S=%lld HQ=%lld HKV=%lld causal=%lld ranks=%d)", s.S, s.HQ, s.HKV, s.causal, s.n);
    return 1;
  }
  p->ninputs = 3; p->noutputs = 1; p->dtype = "bf16";
  p->input_names[IN_Q] = "Q"; p->input_bytes[IN_Q] = (size_t)(s.S_loc() * s.HQ * attn::D * 2);
  p->input_names[IN_K] = "K"; p->input_bytes[IN_K] = (size_t)(s.kv_elems() * 2);
  p->input_names[IN_V] = "V"; p->input_bytes[IN_V] = (size_t)(s.kv_elems() * 2);
  p->output_names[0] = "O"; p->output_bytes[0] = (size_t)(s.S_loc() * s.HQ * attn::D * 2);
  return 0;
}

// The fp32 reference of the last inputs made: the harness checks the same inputs several times (verify:
// candidate, baseline, candidate; benchmark: those and once more after the timed loop), and at S = 16K the
// reference is about a second of CUDA-core work per check. Inputs are a function of (seed, shape, ranks,
// rank) made into harness-private pristine copies no candidate can write, so that key names them exactly.
// Every rank makes and checks the same sequence of configs, so all ranks hit or miss together (a miss
// gathers K and V collectively; a hit calls no collective on any rank).
struct RefCache {
  bool valid = false;
  unsigned long long seed = 0;
  long long S = 0, HQ = 0, HKV = 0, causal = 0;
  int n = 0, rank = -1;
  size_t n_out = 0;
  float *ref = nullptr, *scale = nullptr;
};
static RefCache g_ref;
static unsigned long long g_inputs_seed = 0;

extern "C" int cuco_problem_make_inputs(const cuco_ctx* ctx, void* const* pristine, unsigned long long seed, cudaStream_t st) {
  attn::Shape s = shape_of(ctx);
  g_inputs_seed = seed;
  g_ref.valid = false;   // new pristine inputs (a new seed, or the same seed for another config)
  return cuco_h_fill_bf16(pristine[IN_Q], (size_t)(s.S_loc() * s.HQ * attn::D), seed, 5000 + s.rank, 2.0f, st) |
         cuco_h_fill_bf16(pristine[IN_K], (size_t)s.kv_elems(), seed, 6000 + s.rank, 2.0f, st) |
         cuco_h_fill_bf16(pristine[IN_V], (size_t)s.kv_elems(), seed, 7000 + s.rank, 1.0f, st);
}

// fp32 reference: one CTA of 128 threads per (query row, head); scores in shared memory. The keys are read
// 64 at a time into shared memory (coalesced; rows padded to 65 words, so the 32 keys a warp reads sit in
// 32 banks), and two threads per key sum half of the 128 products each: a thread per key reading its own
// key's row from global memory touched 32 rows per load and took about a second per check at S = 16K.
constexpr int kRefKeys = 64, kRefRowWords = attn::D / 2 + 1;
__global__ void attn_reference(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
                               const __nv_bfloat16* __restrict__ V, int HQ, int HKV, int q_pos0, int S, int causal,
                               float* __restrict__ O, float* __restrict__ O_scale) {
  extern __shared__ float sc[];                  // S scores, then the key tile
  unsigned* kt = reinterpret_cast<unsigned*>(sc + S);
  __shared__ float q[attn::D], red[32], part[attn::D];
  const int i = blockIdx.x, h = blockIdx.y, hk = h / (HQ / HKV), tid = threadIdx.x;
  const int nk = causal ? q_pos0 + i + 1 : S;
  q[tid] = __bfloat162float(Q[((long long)i * HQ + h) * attn::D + tid]);
  const float scale = 1.f / sqrtf((float)attn::D);
  float mx = -INFINITY;
  const int key = tid & (kRefKeys - 1), half = tid / kRefKeys;
  for (int j0 = 0; j0 < nk; j0 += kRefKeys) {
    __syncthreads();                             // the previous tile is consumed (and q is written)
    for (int idx = tid; idx < kRefKeys * (attn::D / 8); idx += blockDim.x) {
      const int r = idx / (attn::D / 8), c4 = idx % (attn::D / 8);
      int4 v = make_int4(0, 0, 0, 0);
      if (j0 + r < nk) v = *reinterpret_cast<const int4*>(K + ((long long)(j0 + r) * HKV + hk) * attn::D + c4 * 8);
      unsigned* dst = kt + r * kRefRowWords + c4 * 4;
      dst[0] = (unsigned)v.x; dst[1] = (unsigned)v.y; dst[2] = (unsigned)v.z; dst[3] = (unsigned)v.w;
    }
    __syncthreads();
    float d = 0.f;
    const unsigned* row = kt + key * kRefRowWords + half * (attn::D / 4);
    const float* qh = q + half * (attn::D / 2);
    for (int w = 0; w < attn::D / 4; w++) {
      const unsigned u = row[w];
      d += qh[2 * w] * __uint_as_float(u << 16) + qh[2 * w + 1] * __uint_as_float(u & 0xffff0000u);
    }
    part[tid] = d;
    __syncthreads();
    if (tid < kRefKeys && j0 + tid < nk) {
      const float x = (part[tid] + part[tid + kRefKeys]) * scale;
      sc[j0 + tid] = x;
      mx = fmaxf(mx, x);
    }
  }
  __syncthreads();
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if ((tid & 31) == 0) red[tid >> 5] = mx;
  __syncthreads();
  mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();
  float sum = 0.f;
  for (int j = tid; j < nk; j += blockDim.x) { float p = expf(sc[j] - mx); sc[j] = p; sum += p; }
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((tid & 31) == 0) red[tid >> 5] = sum;
  __syncthreads();
  sum = red[0] + red[1] + red[2] + red[3];
  float acc = 0.f, acc2 = 0.f;
  for (int j = 0; j < nk; j++) {
    float t = sc[j] * __bfloat162float(V[((long long)j * HKV + hk) * attn::D + tid]);
    acc += t; acc2 += t * t;
  }
  O[((long long)i * HQ + h) * attn::D + tid] = acc / sum;
  O_scale[((long long)i * HQ + h) * attn::D + tid] = sqrtf(acc2) / sum;
}

static int reference(const attn::Shape& s, void* const* pristine, ncclComm_t hcomm, cudaStream_t st, size_t n_out);

extern "C" int cuco_problem_verify(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t st,
                                   double tol, cuco_mismatch* mm) {
  attn::Shape s = shape_of(ctx);
  mm->found = 0;
  const size_t n_out = (size_t)(s.S_loc() * s.HQ * attn::D);
  RefCache& c = g_ref;
  const bool hit = c.valid && c.seed == g_inputs_seed && c.S == s.S && c.HQ == s.HQ && c.HKV == s.HKV &&
                   c.causal == s.causal && c.n == s.n && c.rank == s.rank && c.n_out == n_out;
  int rc = 0;
  if (!hit) rc = reference(s, pristine, hcomm, st, n_out);
  if (!rc) {
    double ex = 0, got = 0;
    long long bad = cuco_check::bf16_vs_f32(ctx->outputs[0].ptr, c.ref, n_out, tol, st, &ex, &got, c.scale);
    if (bad < -1) rc = 1;
    else if (bad >= 0) {
      mm->found = 1; mm->index = bad; mm->expected = ex; mm->got = got;
      strcpy(mm->what, "compute"); strcpy(mm->buffer, "O");
    }
  }
  return rc;
}

// Gathers every rank's K and V (harness communicator) and computes this rank's reference into g_ref.
static int reference(const attn::Shape& s, void* const* pristine, ncclComm_t hcomm, cudaStream_t st, size_t n_out) {
  RefCache& c = g_ref;
  c.valid = false;
  if (c.n_out != n_out) {
    cudaFree(c.ref); cudaFree(c.scale);
    c.ref = c.scale = nullptr; c.n_out = 0;
    if (cudaMalloc(&c.ref, n_out * 4) != cudaSuccess || cudaMalloc(&c.scale, n_out * 4) != cudaSuccess) return 1;
    c.n_out = n_out;
  }
  float *ref = c.ref, *ref_scale = c.scale;
  void *kall = nullptr, *vall = nullptr;
  if (cudaMalloc(&kall, s.kv_elems() * s.n * 2) != cudaSuccess || cudaMalloc(&vall, s.kv_elems() * s.n * 2) != cudaSuccess)
    return 1;
  int rc = 0;
  rc |= ncclGroupStart() != ncclSuccess;
  rc |= ncclAllGather(pristine[IN_K], kall, (size_t)s.kv_elems() * 2, ncclInt8, hcomm, st) != ncclSuccess;
  rc |= ncclAllGather(pristine[IN_V], vall, (size_t)s.kv_elems() * 2, ncclInt8, hcomm, st) != ncclSuccess;
  rc |= ncclGroupEnd() != ncclSuccess;
  const size_t smem = (size_t)s.S * sizeof(float) + (size_t)kRefKeys * kRefRowWords * sizeof(unsigned);
  rc |= cudaFuncSetAttribute(attn_reference, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess;
  if (!rc) {
    attn_reference<<<dim3((unsigned)s.S_loc(), (unsigned)s.HQ), attn::D, smem, st>>>(
        (const __nv_bfloat16*)pristine[IN_Q], (const __nv_bfloat16*)kall, (const __nv_bfloat16*)vall, (int)s.HQ, (int)s.HKV,
        (int)(s.rank * s.S_loc()), (int)s.S, (int)s.causal, ref, ref_scale);
    rc |= cudaGetLastError() != cudaSuccess;
  }
  rc |= cudaStreamSynchronize(st) != cudaSuccess;
  cudaFree(kall); cudaFree(vall);
  if (!rc) {
    c.valid = true; c.seed = g_inputs_seed; c.S = s.S; c.HQ = s.HQ; c.HKV = s.HKV; c.causal = s.causal;
    c.n = s.n; c.rank = s.rank;
  }
  return rc;
}
