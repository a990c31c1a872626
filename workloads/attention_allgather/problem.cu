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
// The verification calls (candidate, baseline, candidate) are checked in full. A benchmark iteration's
// call (fresh inputs each) is checked by verify_sample: every element of O scanned for NaN / Inf (the
// poison of a row left unwritten), and kSamplePairs random (query row, head) pairs, drawn from the seed
// the harness takes from the kernel's entropy after the call, against the fp32 reference of just those
// rows (a row needs every key: S x 128 per row, about a millisecond for all of them at S = 16K where the
// full reference takes about a second). A call that leaves a fraction f of its rows wrong passes one
// such check with probability (1 - f)^kSamplePairs (docs/threat-model.md).
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

// The fp32 reference of the last inputs made: the harness checks the same inputs three times (candidate,
// baseline, candidate), and at S = 16K the reference is about a second of CUDA-core work per check.
// Inputs are a function of (seed, shape, ranks, rank) made into harness-private pristine copies no
// candidate can write, so that key names them exactly.
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

// Every rank's K and V gathered on the harness communicator (kept between checks: a few ms of allocation
// per call otherwise), and the sampled check's buffers.
struct Scratch {
  size_t kv_bytes = 0; void *kall = nullptr, *vall = nullptr;
  int* pairs = nullptr; float *ref = nullptr, *scale = nullptr;   // kSamplePairs each (ref, scale: x D)
  unsigned long long* first = nullptr;                           // first bad index of a scan
};
static Scratch g_scr;
constexpr int kSamplePairs = 2048;

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
                               const int* __restrict__ pairs, float* __restrict__ O, float* __restrict__ O_scale) {
  extern __shared__ float sc[];                  // S scores, then the key tile
  unsigned* kt = reinterpret_cast<unsigned*>(sc + S);
  __shared__ float q[attn::D], red[32], part[attn::D];
  // pairs: CTA b computes the pair (row * HQ + head) pairs[b] into row b of O; else row blockIdx.x, head blockIdx.y
  const int pr = pairs ? pairs[blockIdx.x] : 0;
  const int i = pairs ? pr / HQ : blockIdx.x, h = pairs ? pr % HQ : blockIdx.y, hk = h / (HQ / HKV), tid = threadIdx.x;
  const long long orow = pairs ? blockIdx.x : (long long)i * HQ + h;
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
#pragma unroll 8
  for (int j = 0; j < nk; j++) {   // unrolled: the loads of V go out together (a few CTAs alone when sampled)
    float t = sc[j] * __bfloat162float(V[((long long)j * HKV + hk) * attn::D + tid]);
    acc += t; acc2 += t * t;
  }
  O[orow * attn::D + tid] = acc / sum;
  O_scale[orow * attn::D + tid] = sqrtf(acc2) / sum;
}

// First element of got (bf16, n) that is NaN or +-Inf.
__global__ void first_nonfinite(const unsigned short* __restrict__ got, size_t n, unsigned long long* __restrict__ first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if ((got[i] & 0x7f80u) == 0x7f80u) { atomicMin(first, (unsigned long long)i); return; }
}

// The sampled rows of got against their reference (row b of ref / scale is pair pairs[b]); the first bad
// linear index of O.
__global__ void first_bad_sampled(const __nv_bfloat16* __restrict__ got, const int* __restrict__ pairs,
                                  const float* __restrict__ ref, const float* __restrict__ scale, float tol,
                                  unsigned long long* __restrict__ first) {
  const int b = blockIdx.x, d = threadIdx.x;
  const unsigned long long idx = (unsigned long long)pairs[b] * attn::D + d;
  const float g = __bfloat162float(got[idx]), r = ref[b * attn::D + d];
  if (!(fabsf(g - r) <= tol * (fabsf(r) + scale[b * attn::D + d]))) atomicMin(first, idx);
}

static int reference(const attn::Shape& s, void* const* pristine, ncclComm_t hcomm, cudaStream_t st, size_t n_out);
static int gather_kv(const attn::Shape& s, void* const* pristine, ncclComm_t hcomm, cudaStream_t st);
static int run_reference(const attn::Shape& s, void* const* pristine, const int* pairs, unsigned nblocks, float* ref,
                         float* scale, cudaStream_t st);
static int sampled_check(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t st, double tol,
                         unsigned long long sample_seed, cuco_mismatch* mm);

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
  p->verify_sample = sampled_check;
  return 0;
}

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

// A benchmark iteration's check (cuco_problem.h): every element of O finite, and kSamplePairs (row, head)
// pairs drawn from sample_seed (with replacement; a non-finite element's pair replaces the first, so its
// expected value is reported) within the tolerance of verify. The gather is collective: every rank calls
// this once per iteration, its sample its own.
static int sampled_check(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t st, double tol,
                         unsigned long long sample_seed, cuco_mismatch* mm) {
  attn::Shape s = shape_of(ctx);
  mm->found = 0;
  const long long npairs = s.S_loc() * s.HQ;
  const size_t n_out = (size_t)npairs * attn::D;
  Scratch& g = g_scr;
  if (!g.pairs) {
    if (cudaMalloc(&g.pairs, kSamplePairs * sizeof(int)) != cudaSuccess ||
        cudaMalloc(&g.ref, (size_t)kSamplePairs * attn::D * 4) != cudaSuccess ||
        cudaMalloc(&g.scale, (size_t)kSamplePairs * attn::D * 4) != cudaSuccess)
      return 1;
  }
  if (gather_kv(s, pristine, hcomm, st)) return 1;
  const unsigned long long none = ~0ull;
  unsigned long long nonfinite = none, bad = none;
  int rc = cudaMemcpyAsync(g.first, &none, 8, cudaMemcpyHostToDevice, st) != cudaSuccess;
  first_nonfinite<<<1024, 256, 0, st>>>((const unsigned short*)ctx->outputs[0].ptr, n_out, g.first);
  rc |= cudaMemcpyAsync(&nonfinite, g.first, 8, cudaMemcpyDeviceToHost, st) != cudaSuccess;
  rc |= cudaStreamSynchronize(st) != cudaSuccess;
  if (rc) return 1;
  int pairs[kSamplePairs];
  unsigned long long x = sample_seed;
  for (int b = 0; b < kSamplePairs; b++) {   // splitmix64
    unsigned long long z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; z ^= z >> 31;
    pairs[b] = (int)(z % (unsigned long long)npairs);
  }
  if (nonfinite != none) pairs[0] = (int)(nonfinite / attn::D);
  rc |= cudaMemcpyAsync(g.pairs, pairs, sizeof pairs, cudaMemcpyHostToDevice, st) != cudaSuccess;
  rc |= run_reference(s, pristine, g.pairs, kSamplePairs, g.ref, g.scale, st);
  rc |= cudaMemcpyAsync(g.first, &none, 8, cudaMemcpyHostToDevice, st) != cudaSuccess;
  if (rc) return 1;
  first_bad_sampled<<<kSamplePairs, attn::D, 0, st>>>((const __nv_bfloat16*)ctx->outputs[0].ptr, g.pairs, g.ref, g.scale,
                                                      (float)tol, g.first);
  rc |= cudaGetLastError() != cudaSuccess;
  rc |= cudaMemcpyAsync(&bad, g.first, 8, cudaMemcpyDeviceToHost, st) != cudaSuccess;
  rc |= cudaStreamSynchronize(st) != cudaSuccess;
  if (rc || bad == none) return rc;
  int b = 0;   // the sample row of the first bad element, for its expected value
  while (b < kSamplePairs && (unsigned long long)pairs[b] != bad / attn::D) b++;
  float r = 0; __nv_bfloat16 v;
  rc |= cudaMemcpy(&r, g.ref + (size_t)b * attn::D + bad % attn::D, 4, cudaMemcpyDeviceToHost) != cudaSuccess;
  rc |= cudaMemcpy(&v, (const __nv_bfloat16*)ctx->outputs[0].ptr + bad, 2, cudaMemcpyDeviceToHost) != cudaSuccess;
  mm->found = 1; mm->index = (long long)bad; mm->expected = r; mm->got = __bfloat162float(v);
  strcpy(mm->what, "compute"); strcpy(mm->buffer, "O");
  return rc;
}

// Every rank's K and V (harness communicator) into g_scr.kall / vall, in rank order.
static int gather_kv(const attn::Shape& s, void* const* pristine, ncclComm_t hcomm, cudaStream_t st) {
  Scratch& g = g_scr;
  const size_t bytes = (size_t)s.kv_elems() * 2;
  if (!g.first && cudaMalloc(&g.first, 8) != cudaSuccess) return 1;
  if (g.kv_bytes != bytes) {
    cudaFree(g.kall); cudaFree(g.vall);
    g.kall = g.vall = nullptr; g.kv_bytes = 0;
    if (cudaMalloc(&g.kall, bytes * s.n) != cudaSuccess || cudaMalloc(&g.vall, bytes * s.n) != cudaSuccess) return 1;
    g.kv_bytes = bytes;
  }
  int rc = 0;
  rc |= ncclGroupStart() != ncclSuccess;
  rc |= ncclAllGather(pristine[IN_K], g.kall, bytes, ncclInt8, hcomm, st) != ncclSuccess;
  rc |= ncclAllGather(pristine[IN_V], g.vall, bytes, ncclInt8, hcomm, st) != ncclSuccess;
  rc |= ncclGroupEnd() != ncclSuccess;
  return rc;
}

// The fp32 reference over the gathered K and V: every (row, head) of this rank (pairs == nullptr) or the
// nblocks pairs listed.
static int run_reference(const attn::Shape& s, void* const* pristine, const int* pairs, unsigned nblocks, float* ref,
                         float* scale, cudaStream_t st) {
  const size_t smem = (size_t)s.S * sizeof(float) + (size_t)kRefKeys * kRefRowWords * sizeof(unsigned);
  if (cudaFuncSetAttribute(attn_reference, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) return 1;
  const dim3 grid = pairs ? dim3(nblocks) : dim3((unsigned)s.S_loc(), (unsigned)s.HQ);
  attn_reference<<<grid, attn::D, smem, st>>>(
      (const __nv_bfloat16*)pristine[IN_Q], (const __nv_bfloat16*)g_scr.kall, (const __nv_bfloat16*)g_scr.vall, (int)s.HQ,
      (int)s.HKV, (int)(s.rank * s.S_loc()), (int)s.S, (int)s.causal, pairs, ref, scale);
  return cudaGetLastError() != cudaSuccess;
}

// This rank's full reference into g_ref.
static int reference(const attn::Shape& s, void* const* pristine, ncclComm_t hcomm, cudaStream_t st, size_t n_out) {
  RefCache& c = g_ref;
  c.valid = false;
  if (c.n_out != n_out) {
    cudaFree(c.ref); cudaFree(c.scale);
    c.ref = c.scale = nullptr; c.n_out = 0;
    if (cudaMalloc(&c.ref, n_out * 4) != cudaSuccess || cudaMalloc(&c.scale, n_out * 4) != cudaSuccess) return 1;
    c.n_out = n_out;
  }
  int rc = gather_kv(s, pristine, hcomm, st);
  if (!rc) rc = run_reference(s, pristine, nullptr, 0, c.ref, c.scale, st);
  rc |= cudaStreamSynchronize(st) != cudaSuccess;
  if (!rc) {
    c.valid = true; c.seed = g_inputs_seed; c.S = s.S; c.HQ = s.HQ; c.HKV = s.HKV; c.causal = s.causal;
    c.n = s.n; c.rank = s.rank;
  }
  return rc;
}
