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

#define CUCO_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CUCO_NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, ncclGetErrorString(r_)); return 1; } } while (0)

// EVOLVE-BLOCK-START kernels
// Split tail: the hybrid's large path (one GEMM launch whose finished row chunks the copy engines push to
// the peers, the last rows pushed by the GEMM's epilogue over LSA) with the GEMM's last partial wave
// split in two, so that the data the GEMM finishes last, which no schedule can hide, is half as much.
// * The GEMM's tiles all take the same time, so with S CTA slots (2 per SM) they finish in waves, and the
//   T mod S tiles of the last partial wave (200 of 2048 tiles on 132 SMs for 8192 x 4096) finish
//   together at the very end: what they hold (6.5 MB) crosses NVLink after the last tile, about 20 us.
//   Here each of those tiles is two work items, run after every full tile (one launch, a 1-D grid of
//   items in that order): the first S items finish half a wave before the end and their data crosses
//   while the rest compute; only the final sub-wave's (136 items, 2.2 MB, with 2 parts) crosses after
//   the GEMM.
//   tail_split 2 (default), 3, 4: the tile's k range in that many parts (fp32 partials, the last to
//   finish adds them in part order): the same work per k step as a full tile, and with more parts a
//   shorter final sub-wave (4: 8 items here); a tail tile's sum is associated differently from the
//   baseline's (fp32 rounding, far inside the bf16 tolerance). tail_split -2: two 128 x 64 halves,
//   bit-identical to the full tile (the same mma.sync sequence per output element) but with 1.5x the
//   operand loads per output. tail_split 0: the tail stays full tiles.
// * Row chunks (the chunks knob sets their height) go by copy engine up to the first row of the items that
//   finish last (the final sub-wave of the split tail): the epilogue counts finished tiles per chunk (a
//   GPU-scope fence, then an atomic) and one copy stream per peer waits for each count with
//   cuStreamWaitValue32 (no kernel, no SM), after a one-thread "ready" kernel. The rows of those last
//   items (3 of 64 here) are stored by their epilogues into every peer's C (16-byte LSA stores) once the
//   peers are in the call: an item that stores over NVLink holds its CTA slot until its stores are
//   acknowledged, which only the last items can afford.
// * The call ends with the GEMM: the item that completes it waits (bounded) for every copy stream's
//   "copies done" word, then exchanges "done" with the peers, as in the hybrid.
// * Small shapes (at most small_tiles tiles, one partial wave with nothing to overlap): the hybrid's
//   split-K GEMM whose epilogue pushes every tile over LSA.
struct GaPeers {
  int n;                        // number of peers (nranks - 1), at most 7
  int rank[7];
  __nv_bfloat16* c_blk[7];      // this rank's block inside the peer's C
  unsigned* start_slot[7];      // this rank's "ready" word in the peer's flag window
  unsigned* end_slot[7];        // this rank's "done" word in the peer's flag window
};
constexpr int kFlagStride = 64;  // flag window: [slot][rank] words, slot 0 = ready, slot 1 = done

__global__ void ga_resolve_peers(ncclWindow_t cwin, ncclWindow_t fwin, int me, int nranks, size_t blk_bytes, GaPeers* out) {
  GaPeers p; p.n = nranks - 1;
  for (int k = 1; k < nranks; k++) {
    int q = (me + k) % nranks;
    p.rank[k - 1] = q;
    p.c_blk[k - 1] = (__nv_bfloat16*)ncclGetPeerPointer(cwin, (size_t)me * blk_bytes, q);
    p.start_slot[k - 1] = (unsigned*)ncclGetPeerPointer(fwin, (0 * kFlagStride + me) * sizeof(unsigned), q);
    p.end_slot[k - 1] = (unsigned*)ncclGetPeerPointer(fwin, (1 * kFlagStride + me) * sizeof(unsigned), q);
  }
  *out = p;
}

// One thread: tell every peer "epoch reached" in `slot`, then wait (bounded) until every peer said so.
__device__ __forceinline__ void ga_flag_exchange(const GaPeers& P, unsigned* const* peer_slot, const unsigned* my_flags,
                                                 int slot, unsigned epoch, unsigned long long tmo, unsigned* tflag) {
  __threadfence_system();
  for (int k = 0; k < P.n; k++) cuco_st_release_sys(peer_slot[k], epoch);
  for (int k = 0; k < P.n; k++) cuco_wait_geq(my_flags + slot * kFlagStride + P.rank[k], epoch, tmo, tflag);
}

// "ready" exchange with every peer, before the first copy-engine copy (stream order on comm[0]).
__global__ void ga_ready_barrier(GaPeers P, const unsigned* my_flags, unsigned epoch, unsigned long long tmo,
                                 unsigned* tflag) {
  if (threadIdx.x != 0) return;
  ga_flag_exchange(P, P.start_slot, my_flags, 0, epoch, tmo, tflag);
}

// Large shapes: store locally; tiles of rows before lsa_mtile0 count in their row chunk (GPU-scope fence:
// the copy engine reads through the same L2), tiles from lsa_mtile0 on also go to every peer's C once the
// peers are in this call. Such a tile raises this rank's "ready" at every peer itself (idempotent, the same
// word the ready kernel writes) before it waits for theirs, so it never depends on the ready kernel being
// resident: LSA items (they may outnumber the GPU's CTA slots) could otherwise fill every slot waiting.
// Every epilogue (a full tile, a k-split tile's last part, or a column half) counts in tiles_done; the one
// that completes the call waits for the copy streams' "copies done" words and exchanges "done" with the
// peers.
struct NtEpi {
  __nv_bfloat16* local; long long ldc;
  unsigned* chunk_count; int mtiles_per_chunk;
  int lsa_mtile0;               // first M tile stored into the peers by the epilogue
  GaPeers P;
  const unsigned* my_flags;
  unsigned* tiles_done; const unsigned* copies_done;
  int copy_streams;             // copy streams that write a "copies done" word (0: no copy-engine chunks)
  unsigned epoch, total_items;
  unsigned long long tmo; unsigned* tflag;
  __device__ __forceinline__ void begin_epilogue(int tm, int) const {
    if (tm < lsa_mtile0) return;
    if (threadIdx.x == 0) {
      for (int k = 0; k < P.n; k++) cuco_st_release_sys(P.start_slot[k], epoch);
      for (int k = 0; k < P.n; k++) cuco_wait_geq(my_flags + 0 * kFlagStride + P.rank[k], epoch, tmo, tflag);
    }
    __syncthreads();
  }
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    long long off = (long long)row * ldc + col;
    *reinterpret_cast<int4*>(local + off) = v;
    if (row >= lsa_mtile0 * cuco_gemm::BM)
      for (int k = 0; k < P.n; k++) *reinterpret_cast<int4*>(P.c_blk[k] + off) = v;
  }
  __device__ __forceinline__ void tile_done(int tm, int) const {
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (tm < lsa_mtile0) { __threadfence(); atomicAdd(chunk_count + tm / mtiles_per_chunk, 1u); }
    else __threadfence_system();
    if (atomicAdd(tiles_done, 1u) + 1u != epoch * total_items) return;
    for (int k = 0; k < copy_streams; k++) cuco_wait_geq(copies_done + k, epoch, tmo, tflag);
    ga_flag_exchange(P, P.end_slot, my_flags, 1, epoch, tmo, tflag);
  }
};

constexpr int kHalfN = cuco_gemm::BN / 2;   // columns of a half tile

// cuco_gemm::tile_mainloop for a 128 x 64 tile: the same smem stages (B's upper half unused), the same
// swizzle, pipeline and k order; 4 x 2 warps of 32 x 32 (2 A and 2 B ldmatrix per 8 mma). Every output
// element gets the same mma.sync sequence as in the full tile, so the result is bit-identical.
__device__ __forceinline__ void nt_half_mainloop(unsigned char* smem_raw, const __nv_bfloat16* __restrict__ gA,
                                                 const __nv_bfloat16* __restrict__ gB, long long lda, long long ldb,
                                                 int KT, float (&acc)[2][4][4]) {
  using cuco_gemm::BM; using cuco_gemm::BN; using cuco_gemm::BK; using cuco_gemm::STAGES; using cuco_gemm::THREADS;
  constexpr uint32_t A_STAGE = BM * BK * 2, B_STAGE = BN * BK * 2;   // bytes (as the full tile's)
  const uint32_t sA = (uint32_t)__cvta_generic_to_shared(smem_raw), sB = sA + STAGES * A_STAGE;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 1, wn = warp & 1;  // 4 x 2 warps, each 32 x 32
  // cp.async: two 16-byte chunks of A (128 rows) and one of B (64 rows) per thread per stage
  const __nv_bfloat16* ga[2];
  uint32_t soff[2];
  for (int i = 0; i < 2; i++) {
    int c = tid + i * THREADS, r = c >> 2, ch = c & 3;
    ga[i] = gA + (long long)r * lda + ch * 8;
    soff[i] = (uint32_t)cuco_gemm::swz(r, ch) * 2;
  }
  const __nv_bfloat16* gb = gB + (long long)(tid >> 2) * ldb + (tid & 3) * 8;
  const uint32_t soffb = (uint32_t)cuco_gemm::swz(tid >> 2, tid & 3) * 2;
  uint32_t aoff[2], boff[2];
  for (int ks = 0; ks < 2; ks++) {
    aoff[ks] = (uint32_t)cuco_gemm::swz(wm * 32 + (lane & 15), ks * 2 + (lane >> 4)) * 2;
    boff[ks] = (uint32_t)cuco_gemm::swz(wn * 32 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)) * 2;
  }
  auto load_stage = [&](uint32_t st_a, uint32_t st_b) {
    for (int i = 0; i < 2; i++) {
      cuco_gemm::cp_async16_s(sA + st_a + soff[i], ga[i]);
      ga[i] += BK;
    }
    cuco_gemm::cp_async16_s(sB + st_b + soffb, gb);
    gb += BK;
  };
  uint32_t wa = 0, wb = 0;
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) load_stage(wa, wb);
    cuco_gemm::cp_async_commit();
    wa += A_STAGE;
    wb += B_STAGE;
  }
  uint32_t ra = 0, rb = 0;
  for (int kt = 0; kt < KT; kt++) {
    cuco_gemm::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load_stage(wa, wb);
    cuco_gemm::cp_async_commit();
    wa = wa + A_STAGE == STAGES * A_STAGE ? 0 : wa + A_STAGE;
    wb = wb + B_STAGE == STAGES * B_STAGE ? 0 : wb + B_STAGE;
    for (int ks = 0; ks < 2; ks++) {
      uint32_t af[2][4], bfr[4][2];
      for (int mi = 0; mi < 2; mi++) cuco_gemm::ldmatrix_x4_s(af[mi], sA + ra + aoff[ks] + mi * 16 * BK * 2);
      for (int nj = 0; nj < 2; nj++) {
        uint32_t r[4];
        cuco_gemm::ldmatrix_x4_s(r, sB + rb + boff[ks] + nj * 16 * BK * 2);
        bfr[nj * 2][0] = r[0]; bfr[nj * 2][1] = r[1]; bfr[nj * 2 + 1][0] = r[2]; bfr[nj * 2 + 1][1] = r[3];
      }
      for (int mi = 0; mi < 2; mi++)
        for (int ni = 0; ni < 4; ni++) cuco_gemm::mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
    }
    ra = ra + A_STAGE == STAGES * A_STAGE ? 0 : ra + A_STAGE;
    rb = rb + B_STAGE == STAGES * B_STAGE ? 0 : rb + B_STAGE;
  }
  cuco_gemm::cp_async_wait<0>();
  __syncthreads();
}

// cuco_gemm::tile_epilogue for a half tile: round to bf16, stage in smem, hand rows of 64 columns (from
// column col0 of C) to the epilogue.
template <class Epi>
__device__ __forceinline__ void nt_half_epilogue(unsigned char* smem_raw, const float (&acc)[2][4][4], int tm, int tn,
                                                 int col0, Epi& epi) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 1, wn = warp & 1;
  __nv_bfloat16* sC = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  for (int mi = 0; mi < 2; mi++)
    for (int ni = 0; ni < 4; ni++) {
      int row = wm * 32 + mi * 16 + (lane >> 2), col = wn * 32 + ni * 8 + (lane & 3) * 2;
      *reinterpret_cast<__nv_bfloat162*>(sC + row * cuco_gemm::EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<__nv_bfloat162*>(sC + (row + 8) * cuco_gemm::EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  epi.begin_epilogue(tm, tn);
  for (int i = 0; i < (cuco_gemm::BM * kHalfN / 8) / cuco_gemm::THREADS; i++) {
    int c = tid + i * cuco_gemm::THREADS, r = c >> 3, ch = c & 7;
    int4 v = *reinterpret_cast<const int4*>(sC + r * cuco_gemm::EPI_LD + ch * 8);
    epi.store(tm * cuco_gemm::BM + r, col0 + ch * 8, v);
  }
  epi.tile_done(tm, tn);
}

// One launch over work items in order: items [0, full_items) are the full tiles in row-major order (tile =
// item), the rest are `ways` items per tile of the tail (tiles full_items, full_items + 1, ...), in order:
// * k_ways > 1: the tile's k range in k_ways parts, each into an fp32 partial (ws); the part that finishes
//   last adds the partials in part order (p0 + p1 + ...: the same sum whichever part comes last) and runs
//   the epilogue, as cuco_gemm::gemm_splitk_kernel does.
// * k_ways == 0: the tile's left and right 128 x 64 halves (2 items), each with its own epilogue.
// CTAs are dispatched in item order, so the tail's items fill the slots the full tiles leave.
template <class Epi>
__global__ void __launch_bounds__(cuco_gemm::THREADS, 2)
nt_gemm_kernel(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
               int K, long long lda, long long ldb, int ntiles, int full_items, int k_ways,
               float4* __restrict__ ws, unsigned* __restrict__ sem, Epi epi) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ unsigned is_last;
  const int item = blockIdx.x, KT = K / cuco_gemm::BK, tid = threadIdx.x;
  const bool full = item < full_items;
  const int ways = k_ways > 1 ? k_ways : 2;
  const int j = full ? 0 : item - full_items, t = j / ways, part = j - t * ways, tile = full ? item : full_items + t;
  const int tm = tile / ntiles, tn = tile - tm * ntiles;
  if (full || k_ways > 1) {   // one mainloop and one epilogue for full tiles and k parts
    const int kt0 = full ? 0 : (int)((long long)KT * part / ways), kt1 = full ? KT : (int)((long long)KT * (part + 1) / ways);
    float acc[4][4][4];
    cuco_gemm::zero_acc(acc);
    cuco_gemm::tile_mainloop(smem_raw, A + (long long)tm * cuco_gemm::BM * lda + kt0 * cuco_gemm::BK,
                             B + (long long)tn * cuco_gemm::BN * ldb + kt0 * cuco_gemm::BK, lda, ldb, kt1 - kt0, acc);
    if (!full) {
      float4* tile_ws = ws + (long long)t * ways * (16 * cuco_gemm::THREADS);
      float4* mine = tile_ws + part * (16 * cuco_gemm::THREADS);
      for (int mi = 0; mi < 4; mi++)
        for (int ni = 0; ni < 4; ni++)
          mine[(mi * 4 + ni) * cuco_gemm::THREADS + tid] = make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]);
      __threadfence();
      __syncthreads();
      if (tid == 0) is_last = atomicAdd(sem + t, 1u) + 1u == epi.epoch * (unsigned)ways;
      __syncthreads();
      if (!is_last) return;
      __threadfence();
      for (int mi = 0; mi < 4; mi++)   // p0 (its own partial too comes back from ws: the same values)
        for (int ni = 0; ni < 4; ni++) {
          const float4 v = __ldcg(tile_ws + (mi * 4 + ni) * cuco_gemm::THREADS + tid);
          acc[mi][ni][0] = v.x; acc[mi][ni][1] = v.y; acc[mi][ni][2] = v.z; acc[mi][ni][3] = v.w;
        }
      for (int q = 1; q < ways; q++)   // + p1 + p2 ...: in part order, whichever part is last
        for (int mi = 0; mi < 4; mi++)
          for (int ni = 0; ni < 4; ni++) {
            const float4 v = __ldcg(tile_ws + (q * 16 + mi * 4 + ni) * cuco_gemm::THREADS + tid);
            acc[mi][ni][0] += v.x; acc[mi][ni][1] += v.y; acc[mi][ni][2] += v.z; acc[mi][ni][3] += v.w;
          }
    }
    cuco_gemm::tile_epilogue(smem_raw, acc, tm, tn, epi);
    return;
  }
  const int col0 = tn * cuco_gemm::BN + part * kHalfN;
  float acc[2][4][4];
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 4; b++)
      for (int c = 0; c < 4; c++) acc[a][b][c] = 0.f;
  nt_half_mainloop(smem_raw, A + (long long)tm * cuco_gemm::BM * lda, B + (long long)col0 * ldb, lda, ldb, KT, acc);
  nt_half_epilogue(smem_raw, acc, tm, tn, col0, epi);
}

// Small shapes: every finished tile goes to the local C and to every peer's C. Before its first remote
// store a tile raises this rank's "ready" at every peer (idempotent) and waits (bounded) for theirs, so
// no peer is still poisoning its C; the last tile of the call exchanges "done".
struct PushEpi {
  __nv_bfloat16* local;
  GaPeers P;
  const unsigned* my_flags;
  unsigned* tiles_done;         // finished tiles, monotonic over calls
  unsigned epoch, total_tiles;
  long long ldc;
  unsigned long long tmo; unsigned* tflag;
  __device__ __forceinline__ void begin_epilogue(int, int) const {
    if (threadIdx.x == 0) {
      for (int k = 0; k < P.n; k++) cuco_st_release_sys(P.start_slot[k], epoch);
      for (int k = 0; k < P.n; k++) cuco_wait_geq(my_flags + 0 * kFlagStride + P.rank[k], epoch, tmo, tflag);
    }
    __syncthreads();
  }
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    long long off = (long long)row * ldc + col;
    *reinterpret_cast<int4*>(local + off) = v;
    for (int k = 0; k < P.n; k++) *reinterpret_cast<int4*>(P.c_blk[k] + off) = v;
  }
  __device__ __forceinline__ void tile_done(int, int) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      if (atomicAdd(tiles_done, 1u) + 1u == epoch * total_tiles)
        ga_flag_exchange(P, P.end_slot, my_flags, 1, epoch, tmo, tflag);
    }
  }
};
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=hybrid placement=wave_tail sync=tile_counters issuer=host
constexpr int kChunks = 16;       // cuco:knob chunks
constexpr int kCommPriority = 1;  // cuco:knob comm_priority
constexpr int kSmallTiles = 128;  // cuco:knob small_tiles
constexpr int kSplitK = 0;        // cuco:knob split_k
constexpr int kTailSplit = 2;     // cuco:knob tail_split
struct GaState {
  long long M, N, K;
  bool small;                   // which path this shape takes
  int splits;                   // small path: split-K ways
  unsigned total_tiles;
  // large path: items [0, full_items) full tiles, then `ways` items per tail tile; `counted` epilogues in
  // all (a k-split tile counts once, a tile split in 128 x 64 halves twice); M tiles from lsa_mtile0 on go
  // by LSA; copy-engine chunk c covers M tiles [c * mt_per_chunk, min((c + 1) * mt_per_chunk, lsa_mtile0))
  // and is complete when chunk_items[c] epilogues have counted in it
  int k_ways, full_items, items, counted, lsa_mtile0, mt_per_chunk, ce_chunks;
  unsigned chunk_items[64];
  void* flags; ncclWindow_t fwin;
  unsigned* counters;           // [0, 64): per-chunk tile counts; 64: items done;
                                // [72, 79): "copies done" (epoch) per copy stream; 128...: split-K semaphores
  float* ws;                    // split-K partials (small path; large path's k-split tail)
  GaPeers peers;
  unsigned epoch;
  cudaStream_t comm[7];
  cudaEvent_t ev_start, ev_ready, ev_peer[7];
};

static int impl_setup(cuco_ctx* ctx) {
  GaState* s = new GaState();
  ctx->state = s;
  s->M = cuco_param_get(ctx, "M", 0); s->N = cuco_param_get(ctx, "N", 0); s->K = cuco_param_get(ctx, "K", 0);
  if (ctx->nranks > 8) { snprintf(ctx->error, sizeof ctx->error, "at most 8 ranks"); return 1; }
  const int mtiles = (int)(s->M / cuco_gemm::BM), ntiles = (int)(s->N / cuco_gemm::BN);
  s->total_tiles = (unsigned)(mtiles * ntiles);
  s->small = (long long)s->total_tiles <= kSmallTiles;
  // split-K ways: the knob, or (0) as many as fit the GPU's CTA slots (2 per SM), at most 4
  s->splits = kSplitK;
  if (s->splits <= 0) { s->splits = 1; while (s->splits < 4 && s->total_tiles * (s->splits + 1) <= 2u * ctx->sm_count) s->splits++; }
  CUCO_CK(cudaFuncSetAttribute(nt_gemm_kernel<NtEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  CUCO_CK(cudaFuncSetAttribute(cuco_gemm::gemm_splitk_kernel<PushEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  // The tail: the last partial wave, total mod slots tiles (a whole wave if that is 0; one more wave if it
  // is under a quarter of one, so that the wave before it is not left to cross after a few halves).
  int per_sm = 0;
  CUCO_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, nt_gemm_kernel<NtEpi>, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES));
  const int total = (int)s->total_tiles, slots = (per_sm < 1 ? 1 : per_sm) * (ctx->sm_count < 1 ? 1 : ctx->sm_count);
  int tail = total % slots;
  if (tail == 0) tail = slots;
  if (tail * 4 < slots && tail + slots <= total) tail += slots;
  if (tail > total) tail = total;
  // tail_split: 2-4 k parts per tail tile, -2 two 128 x 64 halves, 0 (or anything else) unsplit
  const bool halves = kTailSplit == -2;
  s->k_ways = kTailSplit >= 2 ? (kTailSplit > 4 ? 4 : kTailSplit) : 0;
  const int ways = s->k_ways ? s->k_ways : (halves ? 2 : 1);
  s->full_items = ways > 1 ? total - tail : total;
  s->items = ways > 1 ? s->full_items + tail * ways : total;
  s->counted = halves ? s->items : total;
  // The items that finish last: the final sub-wave of the split tail (or the last partial wave of full
  // tiles), and the sub-wave before it too when the final one is short (under a quarter of the slots: its
  // items may end before a copy started after the one before would). Their rows go by LSA (few items or
  // none are queued behind them, so their epilogue's wait for the remote stores costs no compute); every
  // earlier row goes by copy engine, so no item before them waits for NVLink and holds the CTA slot the
  // next item needs.
  const int tail_items = s->items - s->full_items;
  int last = ways > 1 ? tail_items % slots : tail;
  if (last == 0) last = slots < tail_items ? slots : tail_items;
  int first_lsa_item = s->items - last - (last * 4 < slots ? slots : 0);
  if (first_lsa_item < 0) first_lsa_item = 0;
  const int first_lsa_tile = first_lsa_item < s->full_items ? first_lsa_item : s->full_items + (first_lsa_item - s->full_items) / ways;
  s->lsa_mtile0 = first_lsa_tile / ntiles;
  const int chunks = kChunks < 1 ? 1 : (kChunks > 64 ? 64 : (kChunks > mtiles ? mtiles : kChunks));
  s->mt_per_chunk = (mtiles + chunks - 1) / chunks;
  s->ce_chunks = (s->lsa_mtile0 + s->mt_per_chunk - 1) / s->mt_per_chunk;
  for (int c = 0; c < s->ce_chunks; c++) {
    const int mt0 = c * s->mt_per_chunk, mt1 = mt0 + s->mt_per_chunk < s->lsa_mtile0 ? mt0 + s->mt_per_chunk : s->lsa_mtile0;
    const int t0 = mt0 * ntiles, t1 = mt1 * ntiles;   // tiles [t0, t1); a tail tile in column halves counts twice
    const int halved = !halves || t1 <= s->full_items ? 0 : t1 - (t0 > s->full_items ? t0 : s->full_items);
    s->chunk_items[c] = (unsigned)(t1 - t0 + halved);
  }
  CUCO_NK(ncclMemAlloc(&s->flags, 4096));
  CUCO_CK(cudaMemset(s->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, s->flags, 4096, &s->fwin, NCCL_WIN_COLL_SYMMETRIC));
  const size_t ncount = 128 + s->total_tiles;
  CUCO_CK(cudaMalloc(&s->counters, ncount * sizeof(unsigned)));
  CUCO_CK(cudaMemset(s->counters, 0, ncount * sizeof(unsigned)));
  if (s->small) CUCO_CK(cudaMalloc(&s->ws, cuco_gemm::splitk_ws_bytes(s->total_tiles, s->splits)));
  else if (s->k_ways) CUCO_CK(cudaMalloc(&s->ws, cuco_gemm::splitk_ws_bytes(tail, s->k_ways)));
  GaPeers* d; CUCO_CK(cudaMalloc(&d, sizeof(GaPeers)));
  ga_resolve_peers<<<1, 1>>>(ctx->outputs[0].win, s->fwin, ctx->rank, ctx->nranks, (size_t)s->M * s->N * 2, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&s->peers, d, sizeof(GaPeers), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  for (int k = 0; k < s->peers.n; k++) {
    CUCO_CK(cudaStreamCreateWithPriority(&s->comm[k], cudaStreamNonBlocking, kCommPriority ? hi : lo));
    CUCO_CK(cudaEventCreateWithFlags(&s->ev_peer[k], cudaEventDisableTiming));
  }
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_ready, cudaEventDisableTiming));
  s->epoch = 0;
  return 0;
}

static int run_small(cuco_ctx* ctx, GaState* s) {
  const size_t blk = (size_t)s->M * s->N;
  PushEpi epi;
  epi.local = (__nv_bfloat16*)ctx->outputs[0].ptr + (size_t)ctx->rank * blk;
  epi.P = s->peers;
  epi.my_flags = (const unsigned*)s->flags;
  epi.tiles_done = s->counters + 64;
  epi.epoch = s->epoch; epi.total_tiles = s->total_tiles;
  epi.ldc = s->N;
  epi.tmo = ctx->spin_timeout_ns; epi.tflag = ctx->timeout_flag;
  CUCO_CK(cuco_gemm::launch_splitk((const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr,
                                   (int)s->N, (int)s->K, s->K, s->K, 0, (int)(s->M / cuco_gemm::BM), s->splits,
                                   s->ws, s->counters + 128, s->epoch, epi, ctx->stream));
  return 0;
}

static int run_large(cuco_ctx* ctx, GaState* s) {
  const size_t blk = (size_t)s->M * s->N, mtile_elems = (size_t)cuco_gemm::BM * s->N;
  const unsigned ntiles = (unsigned)(s->N / cuco_gemm::BN);
  __nv_bfloat16* local = (__nv_bfloat16*)ctx->outputs[0].ptr + (size_t)ctx->rank * blk;
  // the "ready" exchange goes first, so that its one-thread kernel is resident before the GEMM fills the GPU
  CUCO_CK(cudaEventRecord(s->ev_start, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(s->comm[0], s->ev_start, 0));
  ga_ready_barrier<<<1, 32, 0, s->comm[0]>>>(s->peers, (const unsigned*)s->flags, s->epoch, ctx->spin_timeout_ns,
                                             ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaEventRecord(s->ev_ready, s->comm[0]));
  const int copy_streams = s->ce_chunks > 0 ? s->peers.n : 0;
  NtEpi epi;
  epi.local = local; epi.ldc = s->N; epi.chunk_count = s->counters; epi.mtiles_per_chunk = s->mt_per_chunk;
  epi.lsa_mtile0 = s->lsa_mtile0; epi.P = s->peers; epi.my_flags = (const unsigned*)s->flags;
  epi.tiles_done = s->counters + 64; epi.copies_done = s->counters + 72;
  epi.copy_streams = copy_streams; epi.epoch = s->epoch; epi.total_items = (unsigned)s->counted;
  epi.tmo = ctx->spin_timeout_ns; epi.tflag = ctx->timeout_flag;
  nt_gemm_kernel<NtEpi><<<(unsigned)s->items, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, ctx->stream>>>(
      (const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr, (int)s->K, s->K, s->K,
      (int)ntiles, s->full_items, s->k_ways, reinterpret_cast<float4*>(s->ws), s->counters + 128, epi);
  CUCO_CK(cudaGetLastError());
  for (int k = 1; k < copy_streams; k++) CUCO_CK(cudaStreamWaitEvent(s->comm[k], s->ev_ready, 0));
  for (int c = 0; c < s->ce_chunks; c++) {
    const int mt0 = c * s->mt_per_chunk;
    const int mt1 = mt0 + s->mt_per_chunk < s->lsa_mtile0 ? mt0 + s->mt_per_chunk : s->lsa_mtile0;
    const unsigned want = s->epoch * s->chunk_items[c];
    for (int k = 0; k < s->peers.n; k++) {
      CUresult r = cuco_stream_wait_value32((CUstream)s->comm[k], (CUdeviceptr)(s->counters + c), want, CU_STREAM_WAIT_VALUE_GEQ);
      if (r != CUDA_SUCCESS) { snprintf(ctx->error, sizeof ctx->error, "cuStreamWaitValue32: error %d", (int)r); return 1; }
      CUCO_CK(cudaMemcpyAsync(s->peers.c_blk[k] + (size_t)mt0 * mtile_elems, local + (size_t)mt0 * mtile_elems,
                              (size_t)(mt1 - mt0) * mtile_elems * 2, cudaMemcpyDeviceToDevice, s->comm[k]));
    }
  }
  // each copy stream says "my copies are done" (a write after them in stream order); the GEMM's last item
  // waits for these words, then exchanges "done". The streams are still joined to ctx->stream.
  for (int k = 0; k < copy_streams; k++) {
    CUresult r = cuco_stream_write_value32((CUstream)s->comm[k], (CUdeviceptr)(s->counters + 72 + k), s->epoch, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) { snprintf(ctx->error, sizeof ctx->error, "cuStreamWriteValue32: error %d", (int)r); return 1; }
  }
  for (int k = 0; k < s->peers.n; k++) {
    CUCO_CK(cudaEventRecord(s->ev_peer[k], s->comm[k]));
    CUCO_CK(cudaStreamWaitEvent(ctx->stream, s->ev_peer[k], 0));
  }
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  s->epoch++;
  return s->small ? run_small(ctx, s) : run_large(ctx, s);
}

static int impl_teardown(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, s->fwin);
  ncclMemFree(s->flags);
  cudaFree(s->counters);
  if (s->ws) cudaFree(s->ws);
  for (int k = 0; k < s->peers.n; k++) { cudaStreamDestroy(s->comm[k]); cudaEventDestroy(s->ev_peer[k]); }
  cudaEventDestroy(s->ev_start); cudaEventDestroy(s->ev_ready);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
