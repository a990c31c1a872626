// moe_dispatch_combine candidate: every rank routes its T tokens to the top-K of E = EL * n experts, sends
// each (token, expert) row to the rank that owns the expert, runs its EL experts (gate/up GEMM, SwiGLU,
// down GEMM) on what it received, sends the results back, and combines them, weighted, in token order.
// Only the EVOLVE-BLOCKs change; the harness (../_harness/cuda) calls the cuco_candidate_* functions at
// the bottom. moe_common.cuh (frozen) defines the routing and holds kernels any candidate may use.
// ctx->inputs: X (T x H), S (T x E scores), W1 (EL x 2F x H), W2 (EL x H x F); ctx->outputs: Y (T x H),
// ROUTE (T x K int32 expert ids), RECV (EL x n*T u32: how often each global token reached each local
// expert). All are NCCL symmetric windows.
#include "cuco_abi.h"
#include "cuco_device.cuh"
#include "cuco_gemm.cuh"
#include "moe_common.cuh"
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <nccl.h>
#include <nccl_device.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUCO_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CUCO_NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, ncclGetErrorString(r_)); return 1; } } while (0)

static moe::Shape moe_shape(const cuco_ctx* ctx) {
  return moe::Shape{cuco_param_get(ctx, "T", 0), cuco_param_get(ctx, "H", 0), cuco_param_get(ctx, "F", 0),
                    cuco_param_get(ctx, "EL", 0), cuco_param_get(ctx, "K", 0), cuco_param_get(ctx, "skew", 0),
                    ctx->nranks, ctx->rank};
}

// EVOLVE-BLOCK-START kernels
// Grouped expert GEMMs over the real row counts, own rows read in place, copy-engine dispatch and return:
//  * route and place (as the seed), one ncclAllGather of every rank's counts; the host waits for it once,
//    so every rank knows every receiver's layout: per local expert one block of rows (a multiple of 128),
//    this rank's own rows first, then each other source's in ring order, no padding between sources;
//  * one kernel on a high-priority side stream gathers the rows for the other ranks into a send buffer
//    (warps, dispatch_ctas CTAs, local stores only); then a copy stream copies each (expert, destination)
//    bucket, rows and global token ids, into the owner's windows with the copy engines, each bucket followed
//    by a 4-byte copy of the call's epoch into the owner's per-(source, expert) counter: no SM stands
//    between a bucket and its counter, so GEMM CTAs spinning on counters can never hold one up;
//  * one gate/up GEMM grid over every expert's tiles (tile lists from the real counts, so no empty or
//    per-expert tail waves): every expert's own-row tiles first (rows gathered from X in place, no copy),
//    then the tiles with remote rows (their CTAs wait, bounded, for their sources' counters, long raised by
//    then); its epilogue applies SwiGLU (a tile holds 64 gate and the matching 64 up columns), so G never
//    goes to memory;
//  * the down GEMM in two grids: the tiles with remote rows first (results stored locally, in place of their
//    consumed inputs), whose rows the copy engines then copy back into each source's return window, one
//    contiguous copy per (expert, source), while the own rows' grid runs and stores straight into this
//    rank's return window; the source waits for every owner's flag and combines.
// Flag window of each rank (4 KiB of u32, every word written by a copy engine): [128 + src] returned,
// [256 + src * EL + le] rows from src for local expert le landed (call epochs).
constexpr int kMoeMaxRanks = 16, kMoeMaxEL = 32, kMoeMaxE = 64;
struct MoePeers {
  __nv_bfloat16* xr[kMoeMaxRanks];   // receive windows (block layout, rows of H)
  int* ids[kMoeMaxRanks];            // the global token id of each received row
  __nv_bfloat16* ret[kMoeMaxRanks];  // return windows: rows in the source's placement order (moe::place_routes)
  unsigned* flags[kMoeMaxRanks];
};
// This call's layout on this rank, from every rank's counts (the host computes it after the all-gather).
struct MoePlan {
  int EL, n, me;
  int blk[kMoeMaxEL + 1];   // first receive row of local expert le's block (a multiple of 128); [EL]: all rows
  int own[kMoeMaxEL];       // this rank's own rows of le: block rows [0, own)
  int tot[kMoeMaxEL];       // rows of le from every source
  int own_off[kMoeMaxEL];   // placement row here of the first own row of le
  int seg[kMoeMaxE];        // [le * n + k], k >= 1: first block row of ring source (me + k) % n
  int send_cnt[kMoeMaxE];   // [dest * EL + le]: rows this rank sends to local expert le of dest
  int send_off[kMoeMaxE];   //   their first placement row here
  int send_dst[kMoeMaxE];   //   the receive row on dest they land at
};
// M tiles in groups: group g is tiles [first[g], first[g] + pref[g + 1] - pref[g]) of local expert le[g];
// grid row y is tile first[g] + y - pref[g] of the group with pref[g] <= y < pref[g + 1].
struct MoeTiles {
  int groups;
  int pref[2 * kMoeMaxEL + 1];
  int first[2 * kMoeMaxEL];
  int le[2 * kMoeMaxEL];
};
__device__ __forceinline__ int moe_tile_of(const MoeTiles& L, int y, int& le, int& tm) {
  int g = 0;
  while (g + 1 < L.groups && L.pref[g + 1] <= y) g++;
  le = L.le[g];
  tm = L.first[g] + (y - L.pref[g]);
  return g;
}

__global__ void moe_resolve(ncclWindow_t xw, ncclWindow_t iw, ncclWindow_t rw, ncclWindow_t fw, int n, MoePeers* out) {
  for (int p = 0; p < n; p++) {
    out->xr[p] = (__nv_bfloat16*)ncclGetPeerPointer(xw, 0, p);
    out->ids[p] = (int*)ncclGetPeerPointer(iw, 0, p);
    out->ret[p] = (__nv_bfloat16*)ncclGetPeerPointer(rw, 0, p);
    out->flags[p] = (unsigned*)ncclGetPeerPointer(fw, 0, p);
  }
}
__global__ void moe_wait(const unsigned* flag, unsigned epoch, unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x == 0) cuco_wait_geq(flag, epoch, tmo, tflag);
}

// The rows for the other ranks gathered from X into the send buffer at their placement rows (a warp per row,
// four 16-byte loads in flight per lane), expert by expert, for the copy engines to take to their owners.
__global__ void __launch_bounds__(256) moe_gather(MoePlan p, const __nv_bfloat16* __restrict__ X,
                                                  const int* __restrict__ src_token, long long H,
                                                  __nv_bfloat16* __restrict__ xs) {
  const int lane = threadIdx.x & 31;
  const int gw = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), nw = (int)((gridDim.x * blockDim.x) >> 5);
  for (int le = 0; le < p.EL; le++)
    for (int k = 1; k < p.n; k++) {
      const int e = ((p.me + k) % p.n) * p.EL + le;
      for (int q = gw; q < p.send_cnt[e]; q += nw) {
        const int row = p.send_off[e] + q;
        const int4* src = reinterpret_cast<const int4*>(X + (long long)src_token[row] * H);
        int4* dst = reinterpret_cast<int4*>(xs + (long long)row * H);
        for (long long v0 = lane; v0 < H / 8; v0 += 128) {
          int4 t[4];
          for (int w = 0; w < 4; w++)
            if (v0 + 32 * w < H / 8) t[w] = src[v0 + 32 * w];
          for (int w = 0; w < 4; w++)
            if (v0 + 32 * w < H / 8) dst[v0 + 32 * w] = t[w];
        }
      }
    }
}

// cuco_gemm::tile_mainloop with a row pointer per A and B row a thread loads (rows (tid >> 2) + 64 i):
// the same pipeline, swizzle and arithmetic, only the first addresses differ.
__device__ __forceinline__ void moe_mainloop_rows(unsigned char* smem_raw, const __nv_bfloat16* const (&arow)[2],
                                                  const __nv_bfloat16* const (&brow)[2], int KT, float (&acc)[4][4][4]) {
  using namespace cuco_gemm;
  constexpr uint32_t A_STAGE = BM * BK * 2, B_STAGE = BN * BK * 2;   // bytes
  const uint32_t sA = (uint32_t)__cvta_generic_to_shared(smem_raw), sB = sA + STAGES * A_STAGE;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 2, wn = warp & 3;
  const __nv_bfloat16* ga[2];
  const __nv_bfloat16* gb[2];
  uint32_t soff[2];
  for (int i = 0; i < 2; i++) {
    int c = tid + i * THREADS, r = c >> 2, ch = c & 3;
    ga[i] = arow[i] + ch * 8;
    gb[i] = brow[i] + ch * 8;
    soff[i] = (uint32_t)swz(r, ch) * 2;
  }
  uint32_t aoff[2], boff[2];
  for (int ks = 0; ks < 2; ks++) {
    aoff[ks] = (uint32_t)swz(wm * 64 + (lane & 15), ks * 2 + (lane >> 4)) * 2;
    boff[ks] = (uint32_t)swz(wn * 32 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)) * 2;
  }
  auto load_stage = [&](uint32_t st_a, uint32_t st_b) {
    for (int i = 0; i < 2; i++) {
      cp_async16_s(sA + st_a + soff[i], ga[i]);
      cp_async16_s(sB + st_b + soff[i], gb[i]);
      ga[i] += BK;
      gb[i] += BK;
    }
  };
  uint32_t wa = 0, wb = 0;
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < KT) load_stage(wa, wb);
    cp_async_commit();
    wa += A_STAGE;
    wb += B_STAGE;
  }
  uint32_t ra = 0, rb = 0;
  for (int kt = 0; kt < KT; kt++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load_stage(wa, wb);
    cp_async_commit();
    wa = wa + A_STAGE == STAGES * A_STAGE ? 0 : wa + A_STAGE;
    wb = wb + B_STAGE == STAGES * B_STAGE ? 0 : wb + B_STAGE;
    for (int ks = 0; ks < 2; ks++) {
      uint32_t af[4][4], bfr[4][2];
      for (int mi = 0; mi < 4; mi++) ldmatrix_x4_s(af[mi], sA + ra + aoff[ks] + mi * 16 * BK * 2);
      for (int nj = 0; nj < 2; nj++) {
        uint32_t r[4];
        ldmatrix_x4_s(r, sB + rb + boff[ks] + nj * 16 * BK * 2);
        bfr[nj * 2][0] = r[0]; bfr[nj * 2][1] = r[1]; bfr[nj * 2 + 1][0] = r[2]; bfr[nj * 2 + 1][1] = r[3];
      }
      for (int mi = 0; mi < 4; mi++)
        for (int ni = 0; ni < 4; ni++) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
    }
    ra = ra + A_STAGE == STAGES * A_STAGE ? 0 : ra + A_STAGE;
    rb = rb + B_STAGE == STAGES * B_STAGE ? 0 : rb + B_STAGE;
  }
  cp_async_wait<0>();
  __syncthreads();
}

// Gate/up GEMM and SwiGLU over the tiles of L: tile (tn, y) multiplies its 128 rows (own rows from X through
// the placement, remote rows from the receive window) by W1 rows [64 tn, 64 tn + 64) (gate) and
// [F + 64 tn, F + 64 tn + 64) (up), rounds both to bf16 (as the GEMM's own epilogue does) and writes
// h = bf16(silu(g) * u) for h columns [64 tn, 64 tn + 64) of its rows.
__global__ void __launch_bounds__(cuco_gemm::THREADS, 2)
moe_gate_up(MoePlan p, MoeTiles L, const unsigned* __restrict__ flags, unsigned epoch, unsigned long long tmo,
            unsigned* tflag, const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ xr,
            const int* __restrict__ src_token, const __nv_bfloat16* __restrict__ W1, long long H, long long F,
            __nv_bfloat16* __restrict__ h, int count_groups, unsigned* tiles_done) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int s_le, s_tm, s_count;
  if (threadIdx.x == 0) {
    int le, tm;
    s_count = moe_tile_of(L, blockIdx.y, le, tm) < count_groups;
    s_le = le; s_tm = tm;
    const int j0 = tm * cuco_gemm::BM - p.blk[le];
    for (int k = 1; k < p.n; k++) {   // remote rows in this tile: wait for each of their sources
      const int a = p.seg[le * p.n + k], b = k + 1 < p.n ? p.seg[le * p.n + k + 1] : p.tot[le];
      if (a < b && a < j0 + cuco_gemm::BM && b > j0)
        cuco_wait_geq(flags + 256 + ((p.me + k) % p.n) * p.EL + le, epoch, tmo, tflag);
    }
  }
  __syncthreads();
  const int le = s_le, tm = s_tm, tn = blockIdx.x;
  const long long base = p.blk[le];
  const int j0 = (int)(tm * (long long)cuco_gemm::BM - base), own = p.own[le], tot = p.tot[le];
  const __nv_bfloat16* arow[2];
  const __nv_bfloat16* brow[2];
  for (int i = 0; i < 2; i++) {
    const int r = (threadIdx.x >> 2) + 64 * i, j = j0 + r;
    arow[i] = j < own ? X + (long long)src_token[p.own_off[le] + j] * H : j < tot ? xr + (base + j) * H : X;
    brow[i] = W1 + ((long long)le * 2 * F + (r < 64 ? 64LL * tn + r : F + 64LL * tn + (r - 64))) * H;
  }
  float acc[4][4][4];
  cuco_gemm::zero_acc(acc);
  moe_mainloop_rows(smem_raw, arow, brow, (int)(H / cuco_gemm::BK), acc);
  // stage the bf16 tile as cuco_gemm::tile_epilogue does, then SwiGLU from it
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wm = warp >> 2, wn = warp & 3;
  __nv_bfloat16* sC = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  for (int mi = 0; mi < 4; mi++)
    for (int ni = 0; ni < 4; ni++) {
      int row = wm * 64 + mi * 16 + (lane >> 2), col = wn * 32 + ni * 8 + (lane & 3) * 2;
      *reinterpret_cast<__nv_bfloat162*>(sC + row * cuco_gemm::EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][0], acc[mi][ni][1]);
      *reinterpret_cast<__nv_bfloat162*>(sC + (row + 8) * cuco_gemm::EPI_LD + col) = __floats2bfloat162_rn(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  for (int i = 0; i < (cuco_gemm::BM * 64 / 8) / cuco_gemm::THREADS; i++) {
    const int c = tid + i * cuco_gemm::THREADS, r = c >> 3, ch = c & 7;
    const __nv_bfloat16* g = sC + r * cuco_gemm::EPI_LD + ch * 8;
    __align__(16) __nv_bfloat16 out[8];
    for (int q = 0; q < 8; q++)
      out[q] = __float2bfloat16(moe::silu(__bfloat162float(g[q])) * __bfloat162float(g[64 + q]));
    *reinterpret_cast<int4*>(h + (tm * (long long)cuco_gemm::BM + r) * F + 64LL * tn + ch * 8) =
        *reinterpret_cast<const int4*>(out);
  }
  if (s_count) {   // a tile the down GEMM waits for (tail_fill): its h rows stored, then counted
    __syncthreads();
    if (tid == 0) { __threadfence(); atomicAdd(tiles_done, 1u); }
  }
}

// Down GEMM epilogue: own rows into this rank's return window at their placement rows, remote rows into
// the receive window in place of their inputs (the copy engines take them home), padding rows nowhere.
struct MoeDownEpi {
  __nv_bfloat16* ret; __nv_bfloat16* xr; long long H, base; int own, tot, own_off;
  __device__ __forceinline__ void begin_epilogue(int, int) const {}
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    const int j = (int)(row - base);
    if (j < own) *reinterpret_cast<int4*>(ret + ((long long)own_off + j) * H + col) = v;
    else if (j < tot) *reinterpret_cast<int4*>(xr + (long long)row * H + col) = v;
  }
  __device__ __forceinline__ void tile_done(int, int) const {}
};
__global__ void __launch_bounds__(cuco_gemm::THREADS, 2)
moe_down(MoePlan p, MoeTiles L, const __nv_bfloat16* __restrict__ h, const __nv_bfloat16* __restrict__ W2, long long H,
         long long F, __nv_bfloat16* ret, __nv_bfloat16* xr, const unsigned* tiles_done, unsigned tiles_target,
         unsigned long long tmo, unsigned* tflag) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int s_le, s_tm;
  if (threadIdx.x == 0) {
    int le, tm;
    moe_tile_of(L, blockIdx.y, le, tm);
    s_le = le; s_tm = tm;
    if (tiles_done) cuco_wait_geq(tiles_done, tiles_target, tmo, tflag);   // its h rows' gate/up tiles (tail_fill)
  }
  __syncthreads();
  const int le = s_le, tm = s_tm, tn = blockIdx.x;
  float acc[4][4][4];
  cuco_gemm::zero_acc(acc);
  cuco_gemm::tile_mainloop(smem_raw, h + tm * (long long)cuco_gemm::BM * F,
                           W2 + ((long long)le * H + (long long)tn * cuco_gemm::BN) * F, F, F, (int)(F / cuco_gemm::BK), acc);
  MoeDownEpi e{ret, xr, H, p.blk[le], p.own[le], p.tot[le], p.own_off[le]};
  cuco_gemm::tile_epilogue(smem_raw, acc, tm, tn, e);
}

// RECV: every received row of local expert le = blockIdx.y (own rows' ids from the placement)
__global__ void moe_recv(MoePlan p, long long nT, const int* __restrict__ gid, const int* __restrict__ ids,
                         unsigned* __restrict__ recv) {
  const int le = blockIdx.y, own = p.own[le], tot = p.tot[le], base = p.blk[le];
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < tot; j += gridDim.x * blockDim.x)
    atomicAdd(recv + le * nT + (j < own ? gid[p.own_off[le] + j] : ids[base + j]), 1u);
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=fused sync=source_counters issuer=host
constexpr int kDispatchCtas = 32;  // cuco:knob dispatch_ctas
// 1: the gate/up grid and the remote tiles' down GEMM run on a high-priority stream, the own tiles' down GEMM
// at once on the timed stream, each CTA after a counter of finished own gate/up tiles: it gets only the SMs
// the high-priority grids leave idle (their last waves), and what is left of it runs while the copy engines
// return the remote rows. 0: one stream, three grids one after another.
constexpr int kTailFill = 0;  // cuco:knob tail_fill
struct MoeState {
  moe::Shape s;
  long long cap;                     // receive rows: every expert's block, each a multiple of 128
  int *counts, *offsets, *chunk_cnt, *chunk_base, *pos, *src_token, *gid, *allc, *hall;
  unsigned* done;
  float* weight;
  __nv_bfloat16 *h, *xs;              // xs: the send buffer (rows for other ranks, at their placement rows)
  void *xr, *ids, *ret, *flags;
  ncclWindow_t xw, iw, rw, fw;
  MoePeers peers;
  unsigned epoch;
  cudaStream_t side;                 // high priority: the send rows' gather
  cudaStream_t copy;                 // the copy engines' dispatch, then their return
  cudaEvent_t ev_gathered;
  unsigned* epoch_host;              // pinned: this call's epoch, copied to epoch_dev
  unsigned* epoch_dev;               // the source of every counter copy of this call
  cudaStream_t crit;                 // high priority: the remote rows' GEMMs (tail_fill 1)
  cudaEvent_t ev_placed, ev_remote_down, ev_done;
  unsigned* own_gate_done;           // finished own gate/up tiles, over all calls (tail_fill 1)
  unsigned own_gate_target;
};

// Rank r's receive layout from every rank's counts: block start per local expert, and per (le, ring k) the
// first block row of source (r + k) % n.
static void moe_layout(const MoeState* st, int r, std::vector<int>& blk, std::vector<int>& seg, std::vector<int>& tot) {
  const moe::Shape& s = st->s;
  const int EL = (int)s.EL, n = s.n, E = (int)s.E();
  blk.assign(EL + 1, 0);
  seg.assign(EL * n, 0);
  tot.assign(EL, 0);
  for (int le = 0; le < EL; le++) {
    int a = 0;
    for (int k = 0; k < n; k++) { seg[le * n + k] = a; a += st->hall[((r + k) % n) * E + r * EL + le]; }
    tot[le] = a;
    blk[le + 1] = blk[le] + (int)moe::round128(a);
  }
}
static int moe_place_off(const MoeState* st, int q, int e) {   // rank q's placement row of its first row for expert e
  int a = 0;
  for (int x = 0; x < e; x++) a += st->hall[q * st->s.E() + x];
  return a;
}
static void moe_tiles_add(MoeTiles& L, int le, int first, int count) {
  L.le[L.groups] = le; L.first[L.groups] = first;
  L.pref[L.groups + 1] = L.pref[L.groups] + count;
  L.groups++;
}

static int impl_setup(cuco_ctx* ctx) {
  MoeState* st = new MoeState();
  ctx->state = st;
  moe::Shape s = st->s = moe_shape(ctx);
  if (s.n > kMoeMaxRanks || s.EL > kMoeMaxEL || s.E() > kMoeMaxE || !moe::shape_ok(s)) {
    snprintf(ctx->error, sizeof ctx->error, "needs at most %d ranks, %d experts per rank, %d experts, and the shared "
             "GEMM's shapes (T, H, F multiples of 128)", kMoeMaxRanks, kMoeMaxEL, kMoeMaxE);
    return 1;
  }
  const long long TK = s.T * s.K, E = s.E(), nT = s.n * s.T;
  st->cap = (s.K < s.EL ? s.K : s.EL) * nT + 128 * s.EL;
  CUCO_CK(cudaMalloc(&st->counts, E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->offsets, (E + 1) * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->chunk_cnt, moe::route_chunks(TK) * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->chunk_base, moe::route_chunks(TK) * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->pos, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->src_token, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->gid, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->allc, s.n * E * sizeof(int)));
  CUCO_CK(cudaMallocHost(&st->hall, s.n * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->done, 2 * sizeof(unsigned)));
  CUCO_CK(cudaMemset(st->done, 0, 2 * sizeof(unsigned)));
  st->own_gate_done = st->done;
  st->epoch_dev = st->done + 1;
  st->own_gate_target = 0;
  CUCO_CK(cudaMalloc(&st->weight, TK * sizeof(float)));
  CUCO_CK(cudaMalloc(&st->h, st->cap * s.F * 2));
  CUCO_CK(cudaMalloc(&st->xs, TK * s.H * 2));
  CUCO_NK(ncclMemAlloc(&st->xr, st->cap * s.H * 2));
  CUCO_NK(ncclMemAlloc(&st->ids, st->cap * sizeof(int)));
  CUCO_NK(ncclMemAlloc(&st->ret, TK * s.H * 2));
  CUCO_NK(ncclMemAlloc(&st->flags, 4096));
  CUCO_CK(cudaMemset(st->xr, 0, st->cap * s.H * 2));
  CUCO_CK(cudaMemset(st->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->xr, st->cap * s.H * 2, &st->xw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->ids, st->cap * sizeof(int), &st->iw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->ret, TK * s.H * 2, &st->rw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->flags, 4096, &st->fw, NCCL_WIN_COLL_SYMMETRIC));
  MoePeers* d;
  CUCO_CK(cudaMalloc(&d, sizeof(MoePeers)));
  moe_resolve<<<1, 1>>>(st->xw, st->iw, st->rw, st->fw, s.n, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&st->peers, d, sizeof(MoePeers), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&st->side, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_placed, cudaEventDisableTiming));
  CUCO_CK(cudaStreamCreateWithPriority(&st->crit, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaStreamCreateWithPriority(&st->copy, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_gathered, cudaEventDisableTiming));
  CUCO_CK(cudaMallocHost(&st->epoch_host, sizeof(unsigned)));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_remote_down, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_done, cudaEventDisableTiming));
  CUCO_CK(cudaFuncSetAttribute(moe_gate_up, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  CUCO_CK(cudaFuncSetAttribute(moe_down, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  CUCO_CK(cudaDeviceSynchronize());
  st->epoch = 0;
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  const moe::Shape& s = st->s;
  const int EL = (int)s.EL, n = s.n, me = s.rank, E = (int)s.E();
  const long long TK = s.T * s.K, H = s.H, F = s.F;
  const unsigned epoch = ++st->epoch;
  const unsigned* my_flags = (const unsigned*)st->flags;
  __nv_bfloat16* xr = (__nv_bfloat16*)st->xr;
  __nv_bfloat16* ret = (__nv_bfloat16*)st->ret;
  int* route = (int*)ctx->outputs[1].ptr;
  unsigned* recv = (unsigned*)ctx->outputs[2].ptr;
  const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
  const __nv_bfloat16* W1 = (const __nv_bfloat16*)ctx->inputs[2].ptr;
  const __nv_bfloat16* W2 = (const __nv_bfloat16*)ctx->inputs[3].ptr;
  // route and place (as the seed, without its gather of the rows), every rank's counts, one host wait
  moe::route_topk<<<(int)((s.T + 127) / 128), 128, 0, ctx->stream>>>((const __nv_bfloat16*)ctx->inputs[1].ptr, (int)s.T,
                                                                    E, (int)s.K, route, st->weight);
  CUCO_CK(moe::place_routes(route, TK, (int)s.K, E, st->chunk_cnt, st->chunk_base, st->counts, st->offsets, st->pos,
                            st->src_token, st->gid, (int)(me * s.T), ctx->stream));
  CUCO_NK(ncclAllGather(st->counts, st->allc, E, ncclInt32, ctx->comm, ctx->stream));
  CUCO_CK(cudaMemcpyAsync(st->hall, st->allc, (size_t)n * E * sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
  CUCO_CK(cudaEventRecord(st->ev_placed, ctx->stream));
  CUCO_CK(cudaStreamSynchronize(ctx->stream));
  // this call's plan: this rank's layout, and where its rows land on every other rank
  std::vector<int> blk, seg, tot, dblk, dseg, dtot;
  moe_layout(st, me, blk, seg, tot);
  if (blk[EL] > st->cap) {
    snprintf(ctx->error, sizeof ctx->error, "%d receive rows over the capacity %lld", blk[EL], st->cap);
    return 1;
  }
  MoePlan p{};
  p.EL = EL; p.n = n; p.me = me;
  for (int le = 0; le <= EL; le++) p.blk[le] = blk[le];
  for (int le = 0; le < EL; le++) {
    p.own[le] = st->hall[me * E + me * EL + le];
    p.tot[le] = tot[le];
    p.own_off[le] = moe_place_off(st, me, me * EL + le);
    for (int k = 0; k < n; k++) p.seg[le * n + k] = seg[le * n + k];
  }
  for (int k = 1; k < n; k++) {
    const int dest = (me + k) % n, at = (me - dest + n) % n;   // this rank's ring position at dest
    moe_layout(st, dest, dblk, dseg, dtot);
    for (int le = 0; le < EL; le++) {
      const int e = dest * EL + le;
      p.send_cnt[e] = st->hall[me * E + e];
      p.send_off[e] = moe_place_off(st, me, e);
      p.send_dst[e] = dblk[le] + dseg[le * n + at];
    }
  }
  // tile lists: own tiles (rows [0, own) only), remote tiles (the rest of each block, remote rows from its first)
  MoeTiles own_tiles{}, remote_tiles{}, all_tiles{};
  for (int le = 0; le < EL; le++) {
    const int t0 = blk[le] / 128, t_own = p.own[le] / 128, t_all = (blk[le + 1] - blk[le]) / 128;
    moe_tiles_add(own_tiles, le, t0, t_own);
    moe_tiles_add(remote_tiles, le, t0 + t_own, t_all - t_own);
  }
  for (int le = 0; le < EL; le++) moe_tiles_add(all_tiles, le, own_tiles.first[le], own_tiles.pref[le + 1] - own_tiles.pref[le]);
  for (int le = 0; le < EL; le++)
    moe_tiles_add(all_tiles, le, remote_tiles.first[le], remote_tiles.pref[le + 1] - remote_tiles.pref[le]);
  const int n_own = own_tiles.pref[EL], n_remote = remote_tiles.pref[EL], n_all = all_tiles.pref[all_tiles.groups];
  // the gather starts at once, before the GEMMs take the SMs. No "ready" handshake: every rank's previous call
  // (its GEMMs reading its receive window, its combine reading its return window) was over when its counts
  // reached this rank's all-gather, and nothing is written into a peer's windows before that.
  CUCO_CK(cudaStreamWaitEvent(st->side, st->ev_placed, 0));
  CUCO_CK(cudaStreamWaitEvent(st->copy, st->ev_placed, 0));
  if (n > 1) {
    moe_gather<<<kDispatchCtas < 1 ? 1 : kDispatchCtas, 256, 0, st->side>>>(p, X, st->src_token, H, st->xs);
    CUCO_CK(cudaGetLastError());
  }
  CUCO_CK(cudaEventRecord(st->ev_gathered, st->side));
  // gate/up + SwiGLU, own tiles first; then the down GEMM of the tiles with remote rows, whose rows go home by
  // copy engine while the own tiles' down GEMM runs
  const dim3 up_grid((unsigned)(F / 64)), down_grid((unsigned)(H / 128));
  cudaStream_t crit = ctx->stream;
  if (kTailFill) {
    crit = st->crit;
    CUCO_CK(cudaStreamWaitEvent(crit, st->ev_placed, 0));
    st->own_gate_target += (unsigned)n_own * up_grid.x;
  }
  if (n_all > 0)
    moe_gate_up<<<dim3(up_grid.x, (unsigned)n_all), cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, crit>>>(
        p, all_tiles, my_flags, epoch, ctx->spin_timeout_ns, ctx->timeout_flag, X, xr, st->src_token, W1, H, F, st->h,
        kTailFill ? EL : 0, st->own_gate_done);
  if (n_remote > 0)
    moe_down<<<dim3(down_grid.x, (unsigned)n_remote), cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, crit>>>(
        p, remote_tiles, st->h, W2, H, F, ret, xr, nullptr, 0u, ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaEventRecord(st->ev_remote_down, crit));
  // the dispatch, enqueued after the GEMMs (enqueueing it takes the host longer than the GPU needs to start
  // them): bucket by bucket after the gather, each followed by its counter, all by copy engine
  *st->epoch_host = epoch;   // the previous call's copy of it is over (its copy stream was joined, then waited for)
  CUCO_CK(cudaMemcpyAsync(st->epoch_dev, st->epoch_host, sizeof(unsigned), cudaMemcpyHostToDevice, st->copy));
  CUCO_CK(cudaStreamWaitEvent(st->copy, st->ev_gathered, 0));
  for (int le = 0; le < EL; le++)
    for (int k = 1; k < n; k++) {
      const int dest = (me + k) % n, e = dest * EL + le, c = p.send_cnt[e];
      if (c) {
        CUCO_CK(cudaMemcpyAsync(st->peers.xr[dest] + (long long)p.send_dst[e] * H, st->xs + (long long)p.send_off[e] * H,
                                (size_t)c * H * 2, cudaMemcpyDeviceToDevice, st->copy));
        CUCO_CK(cudaMemcpyAsync(st->peers.ids[dest] + p.send_dst[e], st->gid + p.send_off[e], (size_t)c * sizeof(int),
                                cudaMemcpyDeviceToDevice, st->copy));
      }
      CUCO_CK(cudaMemcpyAsync(st->peers.flags[dest] + 256 + me * EL + le, st->epoch_dev, sizeof(unsigned),
                              cudaMemcpyDeviceToDevice, st->copy));
    }
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaStreamWaitEvent(st->copy, st->ev_remote_down, 0));
  for (int k = 1; k < n; k++) {
    const int src = (me + k) % n;
    for (int le = 0; le < EL; le++) {
      const long long c = st->hall[src * E + me * EL + le];
      if (!c) continue;
      const long long from = (long long)blk[le] + seg[le * n + k], to = moe_place_off(st, src, me * EL + le);
      CUCO_CK(cudaMemcpyAsync(st->peers.ret[src] + to * H, xr + from * H, c * H * 2, cudaMemcpyDeviceToDevice, st->copy));
    }
    CUCO_CK(cudaMemcpyAsync(st->peers.flags[src] + 128 + me, st->epoch_dev, sizeof(unsigned), cudaMemcpyDeviceToDevice,
                            st->copy));
  }
  CUCO_CK(cudaEventRecord(st->ev_done, st->copy));   // after the gather's event: the side stream is joined too
  if (n_own > 0)   // tail_fill: launched beside the high-priority grids, each CTA after the own gate/up tiles
    moe_down<<<dim3(down_grid.x, (unsigned)n_own), cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, ctx->stream>>>(
        p, own_tiles, st->h, W2, H, F, ret, xr, kTailFill ? st->own_gate_done : nullptr, st->own_gate_target,
        ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, st->ev_remote_down, 0));   // RECV reads ids the remote tiles waited for
  CUCO_CK(cudaMemsetAsync(recv, 0, ctx->outputs[2].bytes, ctx->stream));
  moe_recv<<<dim3((unsigned)((s.n * s.T + 255) / 256), (unsigned)EL), 256, 0, ctx->stream>>>(p, s.n * s.T, st->gid,
                                                                                            (const int*)st->ids, recv);
  for (int k = 1; k < n; k++)
    moe_wait<<<1, 32, 0, ctx->stream>>>(my_flags + 128 + (me + k) % n, epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
  moe::combine_weighted<<<(int)s.T, 256, 0, ctx->stream>>>(ret, st->pos, st->weight, (int)s.K, H,
                                                          (__nv_bfloat16*)ctx->outputs[0].ptr);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, st->ev_done, 0));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, st->xw);
  ncclCommWindowDeregister(ctx->comm, st->iw);
  ncclCommWindowDeregister(ctx->comm, st->rw);
  ncclCommWindowDeregister(ctx->comm, st->fw);
  ncclMemFree(st->xr); ncclMemFree(st->ids); ncclMemFree(st->ret); ncclMemFree(st->flags);
  for (void* p : {(void*)st->counts, (void*)st->offsets, (void*)st->chunk_cnt, (void*)st->chunk_base, (void*)st->pos,
                  (void*)st->src_token, (void*)st->gid, (void*)st->allc, (void*)st->done, (void*)st->weight,
                  (void*)st->h, (void*)st->xs})
    cudaFree(p);
  cudaFreeHost(st->hall);
  cudaStreamDestroy(st->side);
  cudaStreamDestroy(st->crit);
  cudaStreamDestroy(st->copy);
  cudaEventDestroy(st->ev_gathered);
  cudaFreeHost(st->epoch_host);
  cudaEventDestroy(st->ev_placed); cudaEventDestroy(st->ev_remote_down); cudaEventDestroy(st->ev_done);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
