// cuco_gemm.cuh -- a bf16 tensor-core GEMM (mma.sync m16n8k16, fp32 accumulate, cp.async 4-stage
// pipeline, ldmatrix with an XOR swizzle), shared by CUDA workloads. Frozen harness file; baseline and
// candidates include it outside their EVOLVE-BLOCKs (each translation unit gets its own copy: everything
// here has internal linkage). A candidate may also write its own GEMM inside its blocks.
//
//   C[m][n] = sum_k A[m][k] * B[n][k]      A: M x K row-major, B: N x K row-major ("TN"), C: bf16
//   M % 128 == 0, N % 128 == 0, K % 32 == 0, 16-byte aligned rows.
//
// The epilogue is a template parameter: a struct with
//   __device__ void begin_epilogue(int tile_m, int tile_n); // every thread, before the tile's stores
//   __device__ void store(int row, int col, int4 v);   // 8 bf16 values C[row][col .. col+7]
//   __device__ void tile_done(int tile_m, int tile_n); // called by every thread after its stores
// so a candidate can write a finished tile anywhere (local memory, peers' windows through LSA pointers)
// and raise flags. Tiles are scheduled with blockIdx.x over N tiles and blockIdx.y over M tiles, so row
// blocks finish roughly in order of m.
// launch_splitk() is the same GEMM split over K (blockIdx.z), for shapes with fewer tiles than the GPU has
// CTA slots: each split writes an fp32 partial, the last one to finish a tile adds them and runs the
// epilogue. The baseline uses launch() only; the two share tile_mainloop / tile_epilogue.
#ifndef CUCO_GEMM_CUH
#define CUCO_GEMM_CUH
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace {
namespace cuco_gemm {

constexpr int BM = 128, BN = 128, BK = 32, STAGES = 4, THREADS = 256;
constexpr int SMEM_BYTES = STAGES * (BM + BN) * BK * 2;  // 64 KiB
constexpr int EPI_LD = BN + 8;                            // padded epilogue row (bf16 elements)
static_assert(BM * EPI_LD * 2 <= SMEM_BYTES, "epilogue tile must fit the pipeline smem");

// cp.async and ldmatrix take a shared-space (32-bit) address; the *_s forms take one computed once, the
// others a generic pointer into shared memory.
__device__ __forceinline__ void cp_async16_s(uint32_t saddr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(saddr), "l"(gmem));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  cp_async16_s((uint32_t)__cvta_generic_to_shared(smem), gmem);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

__device__ __forceinline__ void ldmatrix_x4_s(uint32_t (&r)[4], uint32_t saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4_s(r, (uint32_t)__cvta_generic_to_shared(smem));
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// smem offset (elements) of 16-byte chunk `ch` (0..3) of row `r` in a [rows][BK] tile, swizzled
__device__ __forceinline__ int swz(int r, int ch) { return r * BK + ((ch ^ ((r >> 1) & 3)) << 3); }

// Plain epilogue: C row-major with leading dimension ldc.
struct StoreEpi {
  __nv_bfloat16* C; long long ldc;
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    *reinterpret_cast<int4*>(C + (long long)row * ldc + col) = v;
  }
  __device__ __forceinline__ void begin_epilogue(int, int) const {}
  __device__ __forceinline__ void tile_done(int, int) const {}
};

// acc += A_tile * B_tile^T over KT k tiles of one 128x128 tile; gA / gB point at the tile's first row of
// A / B, at its first k column. Leaves the pipeline drained (every cp.async waited for, smem free for reuse).
// Every shared-memory address is computed once: the swizzle phase ((row >> 1) & 3) is the same for rows 16
// apart, so a warp's ldmatrix addresses are two per operand plus immediates, and a stage is a rolling byte
// offset. Recomputing them per k step (the first version) spent about 70 of the loop's ~137 instructions on
// address arithmetic, ran 8-9 % slower, and let the epilogue's code move the loop's schedule by up to 5 %
// (docs/gpu-workloads.md, "The hybrid's GEMM schedule, on one GPU"); the arithmetic and its order are
// unchanged (results bit-identical).
__device__ __forceinline__ void tile_mainloop(unsigned char* smem_raw, const __nv_bfloat16* __restrict__ gA,
                                              const __nv_bfloat16* __restrict__ gB, long long lda, long long ldb,
                                              int KT, float (&acc)[4][4][4]) {
  constexpr uint32_t A_STAGE = BM * BK * 2, B_STAGE = BN * BK * 2;   // bytes
  const uint32_t sA = (uint32_t)__cvta_generic_to_shared(smem_raw), sB = sA + STAGES * A_STAGE;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps, each 64 x 32
  // cp.async: two 16-byte chunks of A and two of B per thread per stage, at stage-invariant smem offsets
  const __nv_bfloat16* ga[2];
  const __nv_bfloat16* gb[2];
  uint32_t soff[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    int c = tid + i * THREADS, r = c >> 2, ch = c & 3;
    ga[i] = gA + (long long)r * lda + ch * 8;
    gb[i] = gB + (long long)r * ldb + ch * 8;
    soff[i] = (uint32_t)swz(r, ch) * 2;
  }
  // ldmatrix: this lane's row of A (mi = 0) and of B (nj = 0) at k step ks; mi / nj add 16 rows
  uint32_t aoff[2], boff[2];
#pragma unroll
  for (int ks = 0; ks < 2; ks++) {
    aoff[ks] = (uint32_t)swz(wm * 64 + (lane & 15), ks * 2 + (lane >> 4)) * 2;
    boff[ks] = (uint32_t)swz(wn * 32 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)) * 2;
  }
  auto load_stage = [&](uint32_t st_a, uint32_t st_b) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      cp_async16_s(sA + st_a + soff[i], ga[i]);
      cp_async16_s(sB + st_b + soff[i], gb[i]);
      ga[i] += BK;
      gb[i] += BK;
    }
  };
  uint32_t wa = 0, wb = 0;   // the stage written next (byte offsets)
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) load_stage(wa, wb);
    cp_async_commit();
    wa += A_STAGE;
    wb += B_STAGE;
  }
  uint32_t ra = 0, rb = 0;   // the stage read
  for (int kt = 0; kt < KT; kt++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load_stage(wa, wb);
    cp_async_commit();
    wa = wa + A_STAGE == STAGES * A_STAGE ? 0 : wa + A_STAGE;
    wb = wb + B_STAGE == STAGES * B_STAGE ? 0 : wb + B_STAGE;
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
      uint32_t af[4][4], bfr[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; mi++) ldmatrix_x4_s(af[mi], sA + ra + aoff[ks] + mi * 16 * BK * 2);
#pragma unroll
      for (int nj = 0; nj < 2; nj++) {
        uint32_t r[4];
        ldmatrix_x4_s(r, sB + rb + boff[ks] + nj * 16 * BK * 2);
        bfr[nj * 2][0] = r[0]; bfr[nj * 2][1] = r[1]; bfr[nj * 2 + 1][0] = r[2]; bfr[nj * 2 + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
    }
    ra = ra + A_STAGE == STAGES * A_STAGE ? 0 : ra + A_STAGE;
    rb = rb + B_STAGE == STAGES * B_STAGE ? 0 : rb + B_STAGE;
  }
  cp_async_wait<0>();
  __syncthreads();
}

// Rounds the accumulators to bf16, stages the tile in smem (coalesced rows) and hands it to the epilogue.
template <class Epi>
__device__ __forceinline__ void tile_epilogue(unsigned char* smem_raw, const float (&acc)[4][4][4], int tm, int tn,
                                              Epi& epi) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 2, wn = warp & 3;
  __nv_bfloat16* sC = reinterpret_cast<__nv_bfloat16*>(smem_raw);
#pragma unroll
  for (int mi = 0; mi < 4; mi++)
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
      int row = wm * 64 + mi * 16 + (lane >> 2), col = wn * 32 + ni * 8 + (lane & 3) * 2;
      *reinterpret_cast<__nv_bfloat162*>(sC + row * EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<__nv_bfloat162*>(sC + (row + 8) * EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  epi.begin_epilogue(tm, tn);
#pragma unroll
  for (int i = 0; i < (BM * BN / 8) / THREADS; i++) {
    int c = tid + i * THREADS, r = c >> 4, ch = c & 15;
    int4 v = *reinterpret_cast<const int4*>(sC + r * EPI_LD + ch * 8);
    epi.store(tm * BM + r, tn * BN + ch * 8, v);
  }
  epi.tile_done(tm, tn);
}

__device__ __forceinline__ void zero_acc(float (&acc)[4][4][4]) {
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int k = 0; k < 4; k++) acc[i][j][k] = 0.f;
}

template <class Epi>
__global__ void __launch_bounds__(THREADS, 2)
gemm_kernel(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
            int K, long long lda, long long ldb, int m_tile0, Epi epi) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tn = blockIdx.x, tm = m_tile0 + blockIdx.y;
  float acc[4][4][4];
  zero_acc(acc);
  tile_mainloop(smem_raw, A + (long long)tm * BM * lda, B + (long long)tn * BN * ldb, lda, ldb, K / BK, acc);
  tile_epilogue(smem_raw, acc, tm, tn, epi);
}

// Split-K: blockIdx.z = split s of `splits` takes k tiles [KT*s/splits, KT*(s+1)/splits) of its tile, writes
// its fp32 partial to ws and bumps the tile's semaphore; the split that arrives last adds the others'
// partials and runs the epilogue (no CTA ever waits for another, so any grid size is safe). Semaphores
// count monotonically over calls: the caller passes epoch = 1, 2, ... (one per launch) and never resets.
// For shapes with fewer tiles than the GPU has CTA slots (one partial wave), where a plain tile grid leaves
// SMs idle. ws: splitk_ws_bytes(tiles, splits); sem: one unsigned per tile, zeroed once.
inline size_t splitk_ws_bytes(long long tiles, int splits) { return (size_t)tiles * splits * BM * BN * sizeof(float); }

template <class Epi>
__global__ void __launch_bounds__(THREADS, 2)
gemm_splitk_kernel(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                   int K, long long lda, long long ldb, int m_tile0, float4* __restrict__ ws,
                   unsigned* __restrict__ sem, unsigned epoch, Epi epi) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ unsigned is_last;
  const int tn = blockIdx.x, tm = m_tile0 + blockIdx.y, sp = blockIdx.z, splits = gridDim.z;
  const int KT = K / BK, tid = threadIdx.x;
  const long long tile = (long long)blockIdx.y * gridDim.x + blockIdx.x;
  float acc[4][4][4];
  zero_acc(acc);
  const int kt0 = (int)((long long)KT * sp / splits), kt1 = (int)((long long)KT * (sp + 1) / splits);
  tile_mainloop(smem_raw, A + (long long)tm * BM * lda + kt0 * BK, B + (long long)tn * BN * ldb + kt0 * BK, lda, ldb,
                kt1 - kt0, acc);
  float4* mine = ws + (tile * splits + sp) * (16 * THREADS);
#pragma unroll
  for (int mi = 0; mi < 4; mi++)
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
      mine[(mi * 4 + ni) * THREADS + tid] = make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]);
  __threadfence();
  __syncthreads();
  if (tid == 0) is_last = atomicAdd(sem + tile, 1u) + 1u == epoch * (unsigned)splits;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int s = 0; s < splits; s++) {
    if (s == sp) continue;
    const float4* other = ws + (tile * splits + s) * (16 * THREADS);
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
      for (int ni = 0; ni < 4; ni++) {
        float4 v = __ldcg(other + (mi * 4 + ni) * THREADS + tid);
        acc[mi][ni][0] += v.x; acc[mi][ni][1] += v.y; acc[mi][ni][2] += v.z; acc[mi][ni][3] += v.w;
      }
  }
  tile_epilogue(smem_raw, acc, tm, tn, epi);
}

inline bool shape_ok(long long M, long long N, long long K) {
  return M > 0 && N > 0 && K > 0 && M % BM == 0 && N % BN == 0 && K % BK == 0;
}

// Launches the GEMM over M tiles [m_tile0, m_tile0 + m_tiles) and all N tiles (N / BN).
template <class Epi>
inline cudaError_t launch(const __nv_bfloat16* A, const __nv_bfloat16* B, int N, int K, long long lda,
                          long long ldb, int m_tile0, int m_tiles, Epi epi, cudaStream_t s) {
  cudaError_t e = cudaFuncSetAttribute(gemm_kernel<Epi>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  if (e != cudaSuccess) return e;
  dim3 grid(N / BN, m_tiles);
  gemm_kernel<Epi><<<grid, THREADS, SMEM_BYTES, s>>>(A, B, K, lda, ldb, m_tile0, epi);
  return cudaGetLastError();
}

// Launches the split-K GEMM over M tiles [m_tile0, m_tile0 + m_tiles), all N tiles, `splits` ways
// (clamped to 1 .. K / BK). ws and sem as for gemm_splitk_kernel; epoch >= 1 and new on every launch.
template <class Epi>
inline cudaError_t launch_splitk(const __nv_bfloat16* A, const __nv_bfloat16* B, int N, int K, long long lda,
                                 long long ldb, int m_tile0, int m_tiles, int splits, float* ws, unsigned* sem,
                                 unsigned epoch, Epi epi, cudaStream_t s) {
  cudaError_t e = cudaFuncSetAttribute(gemm_splitk_kernel<Epi>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
  if (e != cudaSuccess) return e;
  if (splits > K / BK) splits = K / BK;
  if (splits < 1) splits = 1;
  dim3 grid(N / BN, m_tiles, splits);
  gemm_splitk_kernel<Epi><<<grid, THREADS, SMEM_BYTES, s>>>(A, B, K, lda, ldb, m_tile0, reinterpret_cast<float4*>(ws),
                                                            sem, epoch, epi);
  return cudaGetLastError();
}

}  // namespace cuco_gemm
}  // namespace
#endif  // CUCO_GEMM_CUH
