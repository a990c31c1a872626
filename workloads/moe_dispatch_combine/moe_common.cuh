// moe_common.cuh -- frozen device code of moe_dispatch_combine, shared by the baseline, the seed, the
// variants and the verifier (problem.cu). A candidate includes it outside its EVOLVE-BLOCKs and may use
// any of it, or write its own inside its blocks. Everything has internal linkage (one copy per TU).
//
// Problem (per rank r of n): T tokens X_r (T x H, bf16) with router scores S_r (T x E, bf16, E = EL * n);
// expert e lives on rank e / EL as local expert e % EL: W1_e (2F x H: gate rows [0, F), up rows [F, 2F)),
// W2_e (H x F). Routing (this file's definition, bit-exact): token t takes the K experts of highest score,
// ties to the lower expert id, in that order; its weights are the softmax of those K scores (fp32).
// Expert e on a row x: y = W2_e * bf16(silu(g) * u), [g; u] = bf16(W1_e * x) (bf16 GEMMs, fp32 accumulate).
// Output Y_r[t] = bf16(sum_k w[t][k] * y_{e_k}(X_r[t])), summed in k order in fp32.
#ifndef MOE_COMMON_CUH
#define MOE_COMMON_CUH
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "cuco_gemm.cuh"

namespace {
namespace moe {

constexpr int kMaxTopK = 16, kMaxExperts = 256;

struct Shape {
  long long T, H, F, EL, K, skew;
  int n, rank;
  long long E() const { return EL * n; }
};

// True when the config is one the kernels below support (the shared GEMM's tile constraints).
inline bool shape_ok(const Shape& s) {
  return s.T > 0 && s.T % 128 == 0 && s.H % 128 == 0 && s.F % 128 == 0 && s.H % 32 == 0 && s.F % 32 == 0 &&
         s.EL >= 1 && s.K >= 1 && s.K <= kMaxTopK && s.K <= s.E() && s.E() <= kMaxExperts && s.n >= 1;
}

// Routing: one thread per token. route[t*K + k] = expert id, weight[t*K + k] = softmax weight.
__global__ void route_topk(const __nv_bfloat16* __restrict__ S, int T, int E, int K, int* __restrict__ route,
                           float* __restrict__ weight) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const __nv_bfloat16* row = S + (long long)t * E;
  int ids[kMaxTopK]; float sc[kMaxTopK];
  for (int k = 0; k < K; k++) {
    int best = -1; float bv = 0.f;
    for (int e = 0; e < E; e++) {
      bool taken = false;
      for (int j = 0; j < k; j++) taken |= ids[j] == e;
      float v = __bfloat162float(row[e]);
      if (!taken && (best < 0 || v > bv)) { best = e; bv = v; }
    }
    ids[k] = best; sc[k] = bv;
  }
  float sum = 0.f;
  for (int k = 0; k < K; k++) { sc[k] = __expf(sc[k] - sc[0]); sum += sc[k]; }
  for (int k = 0; k < K; k++) { route[(long long)t * K + k] = ids[k]; weight[(long long)t * K + k] = sc[k] / sum; }
}

// Placement of the routes into per-expert buckets, stable in (token, slot) order, in three small kernels
// over chunks of kChunk routes: per-chunk counts, their prefix (counts[e], offsets[e] = first row of bucket
// e, buckets in expert order so destination-major, offsets[E] = all rows), then each route's row:
// pos[t*K+k] = row, src_token[row] = t, gid[row] = id_base + t (the global token id).
constexpr int kChunk = 1024;
inline int route_chunks(long long TK) { return (int)((TK + kChunk - 1) / kChunk); }

__global__ void __launch_bounds__(kChunk) count_chunks(const int* __restrict__ route, long long TK, int E,
                                                       int* __restrict__ cnt) {
  __shared__ int hist[kMaxExperts];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  long long i = (long long)blockIdx.x * kChunk + threadIdx.x;
  if (i < TK) atomicAdd(hist + route[i], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[(long long)blockIdx.x * E + e] = hist[e];
}

__global__ void chunk_prefix(const int* __restrict__ cnt, int chunks, int E, int* __restrict__ counts,
                             int* __restrict__ offsets, int* __restrict__ base) {
  __shared__ int tot[kMaxExperts + 1];
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int a = 0;
    for (int c = 0; c < chunks; c++) a += cnt[(long long)c * E + e];
    tot[e] = a; counts[e] = a;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int a = 0;
    for (int e = 0; e < E; e++) { int v = tot[e]; tot[e] = a; a += v; }
    tot[E] = a; offsets[E] = a;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int a = tot[e];
    offsets[e] = a;
    for (int c = 0; c < chunks; c++) { base[(long long)c * E + e] = a; a += cnt[(long long)c * E + e]; }
  }
}

__global__ void __launch_bounds__(kChunk) place_chunks(const int* __restrict__ route, long long TK, int K, int E,
                                                       const int* __restrict__ base, int* __restrict__ pos,
                                                       int* __restrict__ src_token, int* __restrict__ gid, int id_base) {
  __shared__ int wcnt[kChunk / 32][kMaxExperts];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int j = threadIdx.x; j < (kChunk / 32) * E; j += blockDim.x) wcnt[j / E][j % E] = 0;
  __syncthreads();
  long long i = (long long)blockIdx.x * kChunk + threadIdx.x;
  int e = i < TK ? route[i] : -1;
  unsigned same = __match_any_sync(0xffffffffu, e);
  int rank = __popc(same & ((1u << lane) - 1u));
  if (e >= 0 && rank == 0) wcnt[warp][e] = __popc(same);
  __syncthreads();
  for (int x = threadIdx.x; x < E; x += blockDim.x) {   // per expert: exclusive prefix over the warps
    int a = 0;
    for (int w = 0; w < kChunk / 32; w++) { int v = wcnt[w][x]; wcnt[w][x] = a; a += v; }
  }
  __syncthreads();
  if (e < 0) return;
  int row = base[(long long)blockIdx.x * E + e] + wcnt[warp][e] + rank;
  pos[i] = row; src_token[row] = (int)(i / K); gid[row] = id_base + (int)(i / K);
}

// All three; cnt and base hold route_chunks(TK) * E ints each.
inline cudaError_t place_routes(const int* route, long long TK, int K, int E, int* cnt, int* base, int* counts,
                                int* offsets, int* pos, int* src_token, int* gid, int id_base, cudaStream_t st) {
  int chunks = route_chunks(TK);
  count_chunks<<<chunks, kChunk, 0, st>>>(route, TK, E, cnt);
  chunk_prefix<<<1, 256, 0, st>>>(cnt, chunks, E, counts, offsets, base);
  place_chunks<<<chunks, kChunk, 0, st>>>(route, TK, K, E, base, pos, src_token, gid, id_base);
  return cudaGetLastError();
}

// dst[row] = src[idx[row]] for rows [0, rows), rows of H bf16 (16-byte vectors). One CTA per row.
__global__ void gather_rows(const __nv_bfloat16* __restrict__ src, const int* __restrict__ idx, int rows, long long H,
                            __nv_bfloat16* __restrict__ dst) {
  int r = blockIdx.x;
  if (r >= rows) return;
  const int4* s = reinterpret_cast<const int4*>(src + (long long)idx[r] * H);
  int4* d = reinterpret_cast<int4*>(dst + (long long)r * H);
  for (long long c = threadIdx.x; c < H / 8; c += blockDim.x) d[c] = s[c];
}

__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }

// h[r][f] = bf16(silu(G[r][f]) * G[r][F + f]) for rows [0, rows); G is rows x 2F.
__global__ void swiglu(const __nv_bfloat16* __restrict__ G, long long rows, long long F, __nv_bfloat16* __restrict__ h) {
  long long n = rows * F;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long r = i / F, f = i - r * F;
    float g = __bfloat162float(G[r * 2 * F + f]), u = __bfloat162float(G[r * 2 * F + F + f]);
    h[i] = __float2bfloat16(silu(g) * u);
  }
}

// Y[t][:] = bf16(sum_k weight[t*K+k] * R[pos[t*K+k]][:]), fp32 in k order. One CTA per token.
__global__ void combine_weighted(const __nv_bfloat16* __restrict__ R, const int* __restrict__ pos,
                                 const float* __restrict__ weight, int K, long long H, __nv_bfloat16* __restrict__ Y) {
  int t = blockIdx.x;
  for (long long c = threadIdx.x * 2; c < H; c += blockDim.x * 2) {
    float a0 = 0.f, a1 = 0.f;
    for (int k = 0; k < K; k++) {
      float w = weight[(long long)t * K + k];
      __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(R + (long long)pos[(long long)t * K + k] * H + c);
      a0 += w * __bfloat162float(v.x); a1 += w * __bfloat162float(v.y);
    }
    *reinterpret_cast<__nv_bfloat162*>(Y + (long long)t * H + c) = __floats2bfloat162_rn(a0, a1);
  }
}

// The received-token multiset: recv[le * (n*T) + g] += 1 for each received row of local expert le whose
// global token id (source * T + token) is ids[row]; rows [0, rows) of one (local expert) segment.
__global__ void count_received(const int* __restrict__ ids, int rows, long long nT, int le, unsigned* __restrict__ recv) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows) atomicAdd(recv + le * nT + ids[i], 1u);
}

// Expert e of one row block on the shared GEMM: G = A * W1^T (Mp x 2F), h = swiglu(G), Y = h * W2^T.
// Mp is a multiple of 128 (rows past the real ones are computed and ignored). Host-side launches.
inline cudaError_t expert_mlp(const __nv_bfloat16* A, const __nv_bfloat16* W1, const __nv_bfloat16* W2, long long Mp,
                              long long H, long long F, __nv_bfloat16* G, __nv_bfloat16* h, __nv_bfloat16* Y,
                              cudaStream_t st) {
  if (Mp <= 0) return cudaSuccess;
  cuco_gemm::StoreEpi e1{G, 2 * F};
  cudaError_t e = cuco_gemm::launch(A, W1, (int)(2 * F), (int)H, H, H, 0, (int)(Mp / cuco_gemm::BM), e1, st);
  if (e != cudaSuccess) return e;
  long long n = Mp * F;
  swiglu<<<(int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 256, 0, st>>>(G, Mp, F, h);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  cuco_gemm::StoreEpi e2{Y, H};
  return cuco_gemm::launch(h, W2, (int)H, (int)F, F, F, 0, (int)(Mp / cuco_gemm::BM), e2, st);
}

inline long long round128(long long x) { return (x + 127) / 128 * 128; }

}  // namespace moe
}  // namespace
#endif  // MOE_COMMON_CUH
