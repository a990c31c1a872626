// attn_flash.cuh -- a flash-style attention kernel (tiled, online softmax, bf16 mma.sync m16n8k16 with
// fp32 accumulation, cp.async double-buffered K/V tiles), shared by attention_allgather's baseline, seed
// and variants. Frozen harness file; candidates include it outside their EVOLVE-BLOCKs and may write their
// own kernel inside them. Internal linkage.
//
// Layout: Q, O: [q_len][HQ][128]; K, V: [keys][HKV][128] (bf16). GQA: query head h reads KV head
// h / (HQ / HKV). One CTA = 64 queries of one head (4 warps x 16 rows). Keys come as a list of blocks
// (KvList): block b holds keys [pos0, pos0 + len) at its own k / v pointers (a gathered buffer, a peer's
// window, a slice), processed in list order with one online softmax across all of them, so any order is
// exact. causal: key position <= query position (query positions start at q_pos0). A block may carry a
// flag: the CTA waits (bounded, cuco_wait_geq) until *flag >= target before loading its first tile; with
// heads_per_flag > 0 the block has one flag per group of that many query heads (flag[h / heads_per_flag]),
// so K/V that land head group by head group are used as soon as their group is in.
// Output: final (o: bf16, normalised) or partial (o_part: fp32 normalised over this call's keys, lse:
// log2-domain log-sum-exp per row and head, -inf where no key was visible) for a later LSE merge.
#ifndef ATTN_FLASH_CUH
#define ATTN_FLASH_CUH
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <math.h>
#include "cuco_device.cuh"
#include "cuco_gemm.cuh"

namespace {
namespace attn {

constexpr int D = 128, BQ = 64, BKV = 64, THREADS = 128, LDS = D + 8;   // smem row: 272 bytes, conflict-free
constexpr int TILE_ELEMS = BKV * LDS;
constexpr int SMEM_BYTES = 2 * 2 * TILE_ELEMS * 2;                        // 2 stages x (K, V): 68 KiB
constexpr int kMaxBlocks = 16;

struct KvBlock {
  const __nv_bfloat16* k; const __nv_bfloat16* v;   // key pos0's row of this block
  int pos0, len;                                     // len: a multiple of 64
  const unsigned* flag; unsigned target;             // optional: wait until *flag >= target
  int heads_per_flag;                                // 0: one flag for the block
};
struct KvList { KvBlock b[kMaxBlocks]; int n; };

struct Args {
  const __nv_bfloat16* q; __nv_bfloat16* o;          // o == nullptr: partial output
  float* o_part; float* lse;
  int q_len, q_pos0, hq, hkv, causal;
  float scale_log2;                                  // softmax scale * log2(e)
  unsigned long long tmo; unsigned* tflag;
};

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr));
}
__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Tiles of block b this CTA needs (causal: none past its last query).
__device__ __forceinline__ int tiles_of(const KvBlock& B, int causal, int qlast) {
  int nt = B.len / BKV;
  if (causal) {
    int lim = qlast - B.pos0;
    if (lim < 0) return 0;
    int c = lim / BKV + 1;
    nt = c < nt ? c : nt;
  }
  return nt;
}

__global__ void __launch_bounds__(THREADS) flash_fwd(Args a, KvList kv) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const int qt = gridDim.x - 1 - blockIdx.x;        // causal: the heaviest tiles first
  const int h = blockIdx.y, hk = h / (a.hq / a.hkv);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
  const int q0 = qt * BQ;
  const long long qstride = (long long)a.hq * D, kvstride = (long long)a.hkv * D;
  const int qp0 = a.q_pos0 + q0 + warp * 16 + g, qp1 = qp0 + 8, qlast = a.q_pos0 + q0 + BQ - 1;

  uint32_t qf[D / 16][4];
  {
    const __nv_bfloat16* r0 = a.q + (long long)(q0 + warp * 16 + g) * qstride + (long long)h * D + 2 * tig;
    const __nv_bfloat16* r1 = r0 + 8 * qstride;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      qf[ks][0] = *reinterpret_cast<const uint32_t*>(r0 + ks * 16);
      qf[ks][1] = *reinterpret_cast<const uint32_t*>(r1 + ks * 16);
      qf[ks][2] = *reinterpret_cast<const uint32_t*>(r0 + ks * 16 + 8);
      qf[ks][3] = *reinterpret_cast<const uint32_t*>(r1 + ks * 16 + 8);
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -1e30f, m1 = -1e30f, l0 = 0.f, l1 = 0.f;

  auto load = [&](int b, int t, int stage) {
    const KvBlock& B = kv.b[b];
    if (t == 0 && B.flag) {
      if (tid == 0) cuco_wait_geq(B.flag + (B.heads_per_flag ? h / B.heads_per_flag : 0), B.target, a.tmo, a.tflag);
      __syncthreads();
    }
    const __nv_bfloat16* kg = B.k + (long long)t * BKV * kvstride + (long long)hk * D;
    const __nv_bfloat16* vg = B.v + (long long)t * BKV * kvstride + (long long)hk * D;
    const uint32_t sk = sbase + (uint32_t)(stage * 2 * TILE_ELEMS) * 2, sv = sk + TILE_ELEMS * 2;
#pragma unroll
    for (int i = 0; i < (BKV * D / 8) / THREADS; i++) {
      int c = tid + i * THREADS, r = c >> 4, ch = c & 15;
      cuco_gemm::cp_async16_s(sk + (uint32_t)(r * LDS + ch * 8) * 2, kg + r * kvstride + ch * 8);
      cuco_gemm::cp_async16_s(sv + (uint32_t)(r * LDS + ch * 8) * 2, vg + r * kvstride + ch * 8);
    }
  };
  auto advance = [&](int& b, int& t) {
    if (++t >= tiles_of(kv.b[b], a.causal, qlast)) {
      t = 0;
      for (++b; b < kv.n && tiles_of(kv.b[b], a.causal, qlast) == 0; ++b) {}
    }
  };

  int cb = 0, ct = 0;
  while (cb < kv.n && tiles_of(kv.b[cb], a.causal, qlast) == 0) cb++;
  if (cb < kv.n) load(cb, 0, 0);
  cuco_gemm::cp_async_commit();
  int stage = 0;
  while (cb < kv.n) {
    int nb = cb, nt = ct;
    advance(nb, nt);
    const bool early = nb < kv.n && !(nt == 0 && kv.b[nb].flag);   // a flag wait goes after this tile's math
    if (early) load(nb, nt, stage ^ 1);
    cuco_gemm::cp_async_commit();
    cuco_gemm::cp_async_wait<1>();
    __syncthreads();

    const uint32_t sk = sbase + (uint32_t)(stage * 2 * TILE_ELEMS) * 2, sv = sk + TILE_ELEMS * 2;
    const int kstart = kv.b[cb].pos0 + ct * BKV;
    float s[BKV / 8][4];
#pragma unroll
    for (int j = 0; j < BKV / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
      for (int nj = 0; nj < BKV / 16; nj++) {
        uint32_t r[4];
        cuco_gemm::ldmatrix_x4_s(r, sk + (uint32_t)((nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + ks * 16 +
                                                    ((lane >> 3) & 1) * 8) * 2);
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        cuco_gemm::mma_bf16(s[2 * nj], qf[ks], b0);
        cuco_gemm::mma_bf16(s[2 * nj + 1], qf[ks], b1);
      }
    // online softmax (log2 domain); each row's max and scale are the same across its quad of lanes
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < BKV / 8; j++)
#pragma unroll
      for (int c = 0; c < 4; c++) {
        int key = kstart + j * 8 + 2 * tig + (c & 1);
        float v = s[j][c] * a.scale_log2;
        if (a.causal && key > (c < 2 ? qp0 : qp1)) v = -INFINITY;
        s[j][c] = v;
        if (c < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
      }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);
    m0 = n0; m1 = n1;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int j = 0; j < BKV / 8; j++) {
      s[j][0] = exp2f(s[j][0] - m0); s[j][1] = exp2f(s[j][1] - m0);
      s[j][2] = exp2f(s[j][2] - m1); s[j][3] = exp2f(s[j][3] - m1);
      sum0 += s[j][0] + s[j][1]; sum1 += s[j][2] + s[j][3];
    }
    l0 = l0 * c0 + sum0; l1 = l1 * c1 + sum1;     // per-lane partial sums; the quad is summed at the end
#pragma unroll
    for (int i = 0; i < D / 8; i++) { o[i][0] *= c0; o[i][1] *= c0; o[i][2] *= c1; o[i][3] *= c1; }
#pragma unroll
    for (int kk = 0; kk < BKV / 16; kk++) {
      const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dj = 0; dj < D / 16; dj++) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, sv + (uint32_t)((kk * 16 + (lane & 15)) * LDS + dj * 16 + (lane >> 4) * 8) * 2);
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        cuco_gemm::mma_bf16(o[2 * dj], pa, b0);
        cuco_gemm::mma_bf16(o[2 * dj + 1], pa, b1);
      }
    }
    __syncthreads();
    if (nb < kv.n && !early) {
      load(nb, nt, stage ^ 1);
      cuco_gemm::cp_async_commit();
      cuco_gemm::cp_async_wait<0>();
    }
    cb = nb; ct = nt; stage ^= 1;
  }
  cuco_gemm::cp_async_wait<0>();

#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, x);
    l1 += __shfl_xor_sync(0xffffffffu, l1, x);
  }
  const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
  const long long row0 = q0 + warp * 16 + g, row1 = row0 + 8;
#pragma unroll
  for (int i = 0; i < D / 8; i++) {
    const int col = i * 8 + 2 * tig;
    if (a.o) {
      *reinterpret_cast<__nv_bfloat162*>(a.o + row0 * qstride + (long long)h * D + col) = __floats2bfloat162_rn(o[i][0] * i0, o[i][1] * i0);
      *reinterpret_cast<__nv_bfloat162*>(a.o + row1 * qstride + (long long)h * D + col) = __floats2bfloat162_rn(o[i][2] * i1, o[i][3] * i1);
    } else {
      *reinterpret_cast<float2*>(a.o_part + row0 * qstride + (long long)h * D + col) = make_float2(o[i][0] * i0, o[i][1] * i0);
      *reinterpret_cast<float2*>(a.o_part + row1 * qstride + (long long)h * D + col) = make_float2(o[i][2] * i1, o[i][3] * i1);
    }
  }
  if (!a.o && tig == 0) {
    a.lse[row0 * a.hq + h] = l0 > 0.f ? m0 + log2f(l0) : -INFINITY;
    a.lse[row1 * a.hq + h] = l1 > 0.f ? m1 + log2f(l1) : -INFINITY;
  }
}

inline cudaError_t launch(const Args& a, const KvList& kv, cudaStream_t st) {
  cudaError_t e = cudaFuncSetAttribute(flash_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  if (e != cudaSuccess) return e;
  flash_fwd<<<dim3(a.q_len / BQ, a.hq), THREADS, SMEM_BYTES, st>>>(a, kv);
  return cudaGetLastError();
}

// The problem's shape (params S total keys, HQ, HKV, causal; S split evenly over the ranks).
struct Shape {
  long long S, HQ, HKV, causal;
  int n, rank;
  long long S_loc() const { return S / n; }
  long long kv_elems() const { return S_loc() * HKV * D; }   // one rank's K (or V)
};
inline bool shape_ok(const Shape& s) {
  return s.n >= 1 && s.n <= kMaxBlocks && s.S > 0 && s.S % s.n == 0 && s.S_loc() % BQ == 0 && s.HKV > 0 &&
         s.HQ % s.HKV == 0 && s.HQ > 0 && s.HQ <= 128 && (s.causal == 0 || s.causal == 1);
}
inline Args args_for(const Shape& s, const __nv_bfloat16* q, __nv_bfloat16* o, unsigned long long tmo, unsigned* tflag) {
  Args a{};
  a.q = q; a.o = o; a.q_len = (int)s.S_loc(); a.q_pos0 = (int)(s.rank * s.S_loc()); a.hq = (int)s.HQ;
  a.hkv = (int)s.HKV; a.causal = (int)s.causal; a.scale_log2 = 1.4426950408889634f / sqrtf((float)D);
  a.tmo = tmo; a.tflag = tflag;
  return a;
}
// Block j of a gathered [S][HKV][D] pair: keys j*S_loc ..
inline KvBlock gathered_block(const Shape& s, const __nv_bfloat16* kall, const __nv_bfloat16* vall, int j) {
  long long off = (long long)j * s.kv_elems();
  return KvBlock{kall + off, vall + off, (int)(j * s.S_loc()), (int)s.S_loc(), nullptr, 0u, 0};
}

}  // namespace attn
}  // namespace
#endif  // ATTN_FLASH_CUH
