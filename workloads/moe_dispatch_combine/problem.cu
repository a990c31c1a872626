// problem.cu -- frozen problem definition of moe_dispatch_combine for the CUDA harness (its own TU).
//
// Params: T (tokens per rank), H (hidden), F (expert intermediate), EL (experts per rank; E = EL * n),
// K (top-k), skew (0..100: how strongly the router prefers low expert ids, so rank 0's experts: the load
// imbalance a config sets; 0 = balanced). Inputs of rank r: X (T x H), S (T x E router scores, skewed),
// W1 (EL x 2F x H), W2 (EL x H x F) of experts r*EL .. r*EL+EL-1. Outputs: Y (T x H bf16), ROUTE (T x K
// int32), RECV (EL x n*T u32). Semantics: moe_common.cuh.
// Inputs come from the harness's seed and fixed stream ids (X_r 1000+r, S_r 2000+r, W1_e 3000+e, W2_e
// 4000+e), so every rank can rebuild any rank's scores and any expert's weights to verify on its own:
//   ROUTE bit-exact against the routing of its scores;
//   RECV bit-exact against the routes of every rank's scores to this rank's experts (a dropped or
//        duplicated row changes a count: "transfer");
//   Y against an fp32 combine of the experts' outputs recomputed here with the frozen path (shared GEMM,
//        bf16 intermediates), bf16 tolerance ("compute").
#include "cuco_problem.h"
#include "cuco_check.cuh"
#include "moe_common.cuh"
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

enum { IN_X = 0, IN_S = 1, IN_W1 = 2, IN_W2 = 3 };
enum { OUT_Y = 0, OUT_ROUTE = 1, OUT_RECV = 2 };

// The seed of the last make_inputs: verify rebuilds other ranks' inputs from it (a rank process runs one
// config at a time, and verify always follows the make_inputs of its inputs).
static unsigned long long g_inputs_seed = 0;

static moe::Shape shape_of(const cuco_ctx* ctx) {
  return moe::Shape{cuco_param_get(ctx, "T", 0), cuco_param_get(ctx, "H", 0), cuco_param_get(ctx, "F", 0),
                    cuco_param_get(ctx, "EL", 0), cuco_param_get(ctx, "K", 0), cuco_param_get(ctx, "skew", 0),
                    ctx->nranks, ctx->rank};
}

__global__ void moe_skew_scores(__nv_bfloat16* S, long long T, int E, float skew) {
  long long n = T * E;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    int e = (int)(i % E);
    float bias = E > 1 ? skew * 2.f * (float)(E - 1 - e) / (float)(E - 1) : 0.f;
    S[i] = __float2bfloat16(__bfloat162float(S[i]) + bias);
  }
}

static int make_scores(const moe::Shape& s, int r, unsigned long long seed, void* S, cudaStream_t st) {
  if (cuco_h_fill_bf16(S, (size_t)(s.T * s.E()), seed, 2000 + r, 1.0f, st)) return 1;
  moe_skew_scores<<<1024, 256, 0, st>>>((__nv_bfloat16*)S, s.T, (int)s.E(), (float)s.skew / 100.f);
  return cudaGetLastError() != cudaSuccess;
}
static int make_expert(const moe::Shape& s, long long e, unsigned long long seed, void* W1, void* W2, cudaStream_t st) {
  return cuco_h_fill_bf16(W1, (size_t)(2 * s.F * s.H), seed, 3000 + (unsigned)e, 3.0f / sqrtf((float)s.H), st) |
         cuco_h_fill_bf16(W2, (size_t)(s.H * s.F), seed, 4000 + (unsigned)e, 3.0f / sqrtf((float)s.F), st);
}

extern "C" int cuco_problem_describe(const cuco_ctx* ctx, cuco_problem* p) {
  moe::Shape s = shape_of(ctx);
  if (!moe::shape_ok(s) || s.skew < 0 || s.skew > 100) {
    snprintf(p->error, sizeof p->error, "need T, H, F multiples of 128, 1 <= K <= 16, K <= E = EL * ranks <= 256, "
             "0 <= skew <= 100 (got T=%lld H=%lld F=%lld EL=%lld K=%lld skew=%lld ranks=%d)", s.T, s.H, s.F, s.EL, s.K,
             s.skew, s.n);
    return 1;
  }
  p->ninputs = 4; p->noutputs = 3; p->dtype = "bf16";
  p->input_names[IN_X] = "X"; p->input_bytes[IN_X] = (size_t)(s.T * s.H * 2);
  p->input_names[IN_S] = "S"; p->input_bytes[IN_S] = (size_t)(s.T * s.E() * 2);
  p->input_names[IN_W1] = "W1"; p->input_bytes[IN_W1] = (size_t)(s.EL * 2 * s.F * s.H * 2);
  p->input_names[IN_W2] = "W2"; p->input_bytes[IN_W2] = (size_t)(s.EL * s.H * s.F * 2);
  p->output_names[OUT_Y] = "Y"; p->output_bytes[OUT_Y] = (size_t)(s.T * s.H * 2);
  p->output_names[OUT_ROUTE] = "ROUTE"; p->output_bytes[OUT_ROUTE] = (size_t)(s.T * s.K * 4);
  p->output_names[OUT_RECV] = "RECV"; p->output_bytes[OUT_RECV] = (size_t)(s.EL * s.n * s.T * 4);
  return 0;
}

extern "C" int cuco_problem_make_inputs(const cuco_ctx* ctx, void* const* pristine, unsigned long long seed, cudaStream_t st) {
  moe::Shape s = shape_of(ctx);
  g_inputs_seed = seed;
  int rc = cuco_h_fill_bf16(pristine[IN_X], (size_t)(s.T * s.H), seed, 1000 + s.rank, 1.0f, st);
  rc |= make_scores(s, s.rank, seed, pristine[IN_S], st);
  for (long long le = 0; le < s.EL; le++)
    rc |= make_expert(s, s.rank * s.EL + le, seed, (__nv_bfloat16*)pristine[IN_W1] + le * 2 * s.F * s.H,
                      (__nv_bfloat16*)pristine[IN_W2] + le * s.H * s.F, st);
  return rc;
}

// expect[le * nT + src * T + t] += 1 for every route (t, k) of rank src to local expert le of rank me.
__global__ void moe_expect_received(const int* __restrict__ route, long long TK, int K, int EL, int me, long long T,
                                    long long nT, int src, unsigned* __restrict__ expect) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= TK) return;
  int e = route[i];
  if (e / EL == me) atomicAdd(expect + (e % EL) * nT + (long long)src * T + i / K, 1u);
}

// acc[tok[j]][:] += w[j] * Yx[j][:] for the m rows of one expert.
__global__ void moe_accumulate(const __nv_bfloat16* __restrict__ Yx, const int* __restrict__ tok, const float* __restrict__ w,
                               long long H, float* __restrict__ acc) {
  int j = blockIdx.x;
  const float wj = w[j];
  float* a = acc + (long long)tok[j] * H;
  for (long long c = threadIdx.x; c < H; c += blockDim.x) a[c] += wj * __bfloat162float(Yx[(long long)j * H + c]);
}

// A bit-exact difference of two int32 arrays found as u16 index d16: reported per int32 element.
static void u32_mismatch(cuco_mismatch* mm, long long d16, const void* got, const void* ref, const char* what,
                         const char* buf) {
  long long idx = d16 / 2;
  unsigned g = 0, r = 0;
  cudaMemcpy(&g, (const unsigned*)got + idx, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&r, (const unsigned*)ref + idx, 4, cudaMemcpyDeviceToHost);
  mm->found = 1; mm->index = idx; mm->expected = (double)(int)r; mm->got = (double)(int)g;
  strcpy(mm->what, what); strcpy(mm->buffer, buf);
}

// Device buffers of the checks, kept between calls (the benchmark loop checks every call): a cudaMalloc
// and cudaFree per buffer and call synchronised the device and cost more than their use.
namespace {
struct Kept {
  void* p = nullptr;
  size_t bytes = 0;
  template <class T> T* at_least(size_t n) {
    if (bytes < n) {
      if (p) cudaFree(p);
      p = nullptr; bytes = 0;
      if (cudaMalloc(&p, n) != cudaSuccess) return nullptr;
      bytes = n;
    }
    return (T*)p;
  }
};
Kept g_route, g_w, g_tok, g_wsel, g_acc, g_expect, g_scores, g_A, g_G, g_Hm, g_Yx, g_w1, g_w2;
}  // namespace

extern "C" int cuco_problem_verify(const cuco_ctx* ctx, void* const* pristine, ncclComm_t hcomm, cudaStream_t st,
                                   double tol, cuco_mismatch* mm) {
  (void)hcomm;
  moe::Shape s = shape_of(ctx);
  const long long T = s.T, H = s.H, F = s.F, K = s.K, E = s.E(), TK = T * K, nT = s.n * T;
  const unsigned long long seed = g_inputs_seed;
  mm->found = 0;
  const long long Tp = moe::round128(T);
  int* route = g_route.at_least<int>(TK * 4);
  float* w = g_w.at_least<float>(TK * 4);
  int* tok = g_tok.at_least<int>(TK * 4);          // every expert's token rows, expert after expert
  float* wsel = g_wsel.at_least<float>(TK * 4);    // and their routing weights
  float* acc = g_acc.at_least<float>(T * H * 4);
  unsigned* expect = g_expect.at_least<unsigned>(s.EL * nT * 4);
  void* scores = g_scores.at_least<void>(T * E * 2);
  void* A = g_A.at_least<void>(Tp * H * 2);
  void* G = g_G.at_least<void>(Tp * 2 * F * 2);
  void* Hm = g_Hm.at_least<void>(Tp * F * 2);
  void* Yx = g_Yx.at_least<void>(Tp * H * 2);
  void* w1 = g_w1.at_least<void>(2 * F * H * 2);
  void* w2 = g_w2.at_least<void>(H * F * 2);
  bool ok = route && w && tok && wsel && acc && expect && scores && A && G && Hm && Yx && w1 && w2;
  int rc = ok ? 0 : 1;
  // 1. the received multiset, from every rank's routing (this rank's last: its routing stays in `route`)
  if (!rc) rc = cudaMemsetAsync(expect, 0, s.EL * nT * 4, st) != cudaSuccess;
  for (int k = 1; k <= s.n && !rc; k++) {
    int r = (s.rank + k) % s.n;
    const void* S = pristine[IN_S];
    if (r != s.rank) { rc |= make_scores(s, r, seed, scores, st); S = scores; }
    moe::route_topk<<<(int)((T + 127) / 128), 128, 0, st>>>((const __nv_bfloat16*)S, (int)T, (int)E, (int)K, route, w);
    moe_expect_received<<<(unsigned)((TK + 255) / 256), 256, 0, st>>>(route, TK, (int)K, (int)s.EL, s.rank, T, nT, r, expect);
  }
  if (!rc) rc = cudaStreamSynchronize(st) != cudaSuccess;
  unsigned short va = 0, vb = 0;
  if (!rc) {   // 2. ROUTE bit-exact
    long long d = cuco_h_first_diff_u16(ctx->outputs[OUT_ROUTE].ptr, route, (size_t)TK * 2, st, &va, &vb);
    if (d < -1) rc = 1;
    else if (d >= 0) u32_mismatch(mm, d, ctx->outputs[OUT_ROUTE].ptr, route, "routing", "ROUTE");
  }
  if (!rc && !mm->found) {   // 3. RECV bit-exact
    long long d = cuco_h_first_diff_u16(ctx->outputs[OUT_RECV].ptr, expect, (size_t)(s.EL * nT) * 2, st, &va, &vb);
    if (d < -1) rc = 1;
    else if (d >= 0) u32_mismatch(mm, d, ctx->outputs[OUT_RECV].ptr, expect, "transfer", "RECV");
  }
  if (!rc && !mm->found) {   // 4. Y against the fp32 combine of every expert's output
    std::vector<int> hroute(TK); std::vector<float> hw(TK);
    rc |= cudaMemcpy(hroute.data(), route, TK * 4, cudaMemcpyDeviceToHost) != cudaSuccess;
    rc |= cudaMemcpy(hw.data(), w, TK * 4, cudaMemcpyDeviceToHost) != cudaSuccess;
    // Each expert's rows in route order, all experts in one pass and one upload: an upload from pageable
    // memory waits for the stream, so one per expert left the GPU idle between experts.
    std::vector<long long> first(E + 1, 0);
    for (long long i = 0; i < TK && !rc; i++) {
      if (hroute[i] < 0 || hroute[i] >= E) rc = 1;
      else first[hroute[i] + 1]++;
    }
    for (long long e = 0; e < E; e++) first[e + 1] += first[e];
    std::vector<int> ht(TK); std::vector<float> hws(TK); std::vector<long long> at(first.begin(), first.end() - 1);
    for (long long i = 0; i < TK && !rc; i++) { long long j = at[hroute[i]]++; ht[j] = (int)(i / K); hws[j] = hw[i]; }
    if (!rc) rc |= cudaMemcpy(tok, ht.data(), TK * 4, cudaMemcpyHostToDevice) != cudaSuccess;
    if (!rc) rc |= cudaMemcpy(wsel, hws.data(), TK * 4, cudaMemcpyHostToDevice) != cudaSuccess;
    rc |= cudaMemsetAsync(acc, 0, T * H * 4, st) != cudaSuccess;
    for (long long e = 0; e < E && !rc; e++) {   // stream-ordered: the buffers are reused expert after expert
      const int m = (int)(first[e + 1] - first[e]);
      if (m == 0) continue;
      const int* etok = tok + first[e];
      const float* ew = wsel + first[e];
      rc |= cudaMemsetAsync(A, 0, moe::round128(m) * H * 2, st) != cudaSuccess;
      moe::gather_rows<<<m, 128, 0, st>>>((const __nv_bfloat16*)pristine[IN_X], etok, m, H, (__nv_bfloat16*)A);
      const __nv_bfloat16 *W1 = (const __nv_bfloat16*)w1, *W2 = (const __nv_bfloat16*)w2;
      if (e / s.EL == s.rank) {
        W1 = (const __nv_bfloat16*)pristine[IN_W1] + (e % s.EL) * 2 * F * H;
        W2 = (const __nv_bfloat16*)pristine[IN_W2] + (e % s.EL) * H * F;
      } else {
        rc |= make_expert(s, e, seed, w1, w2, st);
      }
      rc |= moe::expert_mlp((const __nv_bfloat16*)A, W1, W2, moe::round128(m), H, F, (__nv_bfloat16*)G,
                            (__nv_bfloat16*)Hm, (__nv_bfloat16*)Yx, st) != cudaSuccess;
      moe_accumulate<<<m, 256, 0, st>>>((const __nv_bfloat16*)Yx, etok, ew, H, acc);
      rc |= cudaGetLastError() != cudaSuccess;
    }
    if (!rc) rc = cudaStreamSynchronize(st) != cudaSuccess;
    if (!rc) {
      double ex = 0, got = 0;
      long long bad = cuco_check::bf16_vs_f32(ctx->outputs[OUT_Y].ptr, acc, (size_t)(T * H), tol, st, &ex, &got);
      if (bad < -1) rc = 1;
      else if (bad >= 0) {
        mm->found = 1; mm->index = bad; mm->expected = ex; mm->got = got;
        strcpy(mm->what, "compute"); strcpy(mm->buffer, "Y");
      }
    }
  }
  return rc;
}
