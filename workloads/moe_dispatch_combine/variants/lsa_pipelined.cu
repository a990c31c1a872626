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
// Device-initiated dispatch and combine over LSA, local rows first and the expert pipeline per source:
//  * every rank says "ready" (its previous call is done with its windows) to every rank (itself included);
//  * dispatch in two passes of one kernel: pass 0 stores this rank's own (token, local expert) rows into
//    its own receive window on the main stream and publishes them at once; pass 1, on a high-priority
//    side stream, pushes the rows for every other rank over LSA while this rank computes its own rows,
//    and its last CTA publishes the counts and raises each owner's per-source counter;
//  * the expert pipeline: own rows' gate/up GEMM and SwiGLU first, then the remote sources' (their GEMM CTAs
//    wait, bounded, for their source's counter, which the peer's pass 1 raised while we computed our rows),
//    then the remote rows' down GEMM, whose epilogue pushes each finished tile straight back into the
//    source's return window, and the own rows' down GEMM last (local stores), so a peer's wait for its
//    tiles ends while this rank still computes;
//  * the source waits until every tile of its rows is back, then combines.
// The local GEMMs never wait, and the waiting remote GEMMs are launched only after them: the side stream's
// dispatch (dispatch_ctas CTAs, launched with pass 0) gets SMs as the local GEMM's CTAs retire, so no
// spinning CTA can keep it out.
// Flag window of each rank (4 KiB of u32): [src] ready, [64 + src] landed, [256 + src*EL + le] rows from src
// for local expert le, [1000] returned tiles (cumulative over calls).
constexpr int kMoeMaxRanks = 16;
struct MoePeers {
  __nv_bfloat16* xr[kMoeMaxRanks];   // receive windows: (le * n + src) * T + slot rows of H
  int* meta[kMoeMaxRanks];           // the route index (t * K + k at the source) of each received row
  __nv_bfloat16* yret[kMoeMaxRanks]; // return windows: row t * K + k
  unsigned* flags[kMoeMaxRanks];
};
struct MoeDev {
  int T, EL, n, me;
  unsigned epoch;
  const unsigned* flags;             // this rank's flag window
  const int* meta;                   // this rank's meta window
  MoePeers peers;
  unsigned long long tmo; unsigned* tflag;
};
__global__ void moe_resolve(ncclWindow_t xw, ncclWindow_t mw, ncclWindow_t yw, ncclWindow_t fw, int n, MoePeers* out) {
  for (int p = 0; p < n; p++) {
    out->xr[p] = (__nv_bfloat16*)ncclGetPeerPointer(xw, 0, p);
    out->meta[p] = (int*)ncclGetPeerPointer(mw, 0, p);
    out->yret[p] = (__nv_bfloat16*)ncclGetPeerPointer(yw, 0, p);
    out->flags[p] = (unsigned*)ncclGetPeerPointer(fw, 0, p);
  }
}
__global__ void moe_iota(int* p, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) p[i] = (int)i;
}
__global__ void moe_ready(MoePeers P, int me, int n, unsigned epoch) {
  if (threadIdx.x < n) cuco_st_release_sys(P.flags[threadIdx.x] + me, epoch);
}
// pass 0: rows whose expert lives on this rank; pass 1: the others. Each pass has its own completion counter.
__global__ void __launch_bounds__(256) moe_lsa_dispatch(MoeDev d, const __nv_bfloat16* __restrict__ X,
                                                        const int* __restrict__ route, int K, long long H,
                                                        int* poscnt, int* sendcnt, unsigned* done, int pass) {
  const int lane = threadIdx.x & 31;
  const long long wid = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5, nw = ((long long)gridDim.x * blockDim.x) >> 5;
  const long long TK = (long long)d.T * K;
  for (long long i = wid; i < TK; i += nw) {
    const int e = route[i], dest = e / d.EL, le = e % d.EL;
    if ((dest == d.me) != (pass == 0)) continue;
    int slot = 0;
    if (lane == 0) {
      cuco_wait_geq(d.flags + dest, d.epoch, d.tmo, d.tflag);
      slot = atomicAdd(poscnt + e, 1);
    }
    slot = __shfl_sync(0xffffffffu, slot, 0);
    const long long row = ((long long)le * d.n + d.me) * d.T + slot;
    const int4* src = reinterpret_cast<const int4*>(X + (i / K) * H);
    int4* dst = reinterpret_cast<int4*>(d.peers.xr[dest] + row * H);
    for (long long c = lane; c < H / 8; c += 32) dst[c] = src[c];
    if (lane == 0) d.peers.meta[dest][row] = (int)i;
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (atomicAdd(done + pass, 1u) != gridDim.x - 1) return;
  __threadfence();                                  // the last CTA of the pass: its rows have been stored
  for (int e = 0; e < d.EL * d.n; e++) {
    const int dest = e / d.EL;
    if ((dest == d.me) != (pass == 0)) continue;
    const int c = atomicExch(poscnt + e, 0);
    sendcnt[e] = c;
    ((volatile unsigned*)d.peers.flags[dest])[256 + d.me * d.EL + e % d.EL] = (unsigned)c;
  }
  __threadfence_system();
  for (int p = 0; p < d.n; p++)
    if ((p == d.me) == (pass == 0)) cuco_st_release_sys(d.peers.flags[p] + 64 + d.me, d.epoch);
  done[pass] = 0;
}

// Segment z of an expert GEMM grid: local expert and source (this rank's own rows first) and its row count.
__device__ __forceinline__ int moe_segment(const MoeDev& d, int z, int& le, int& src) {
  le = z % d.EL; src = (d.me + z / d.EL) % d.n;
  return le * d.n + src;
}
__device__ __forceinline__ int moe_rows(const MoeDev& d, int src, int le) {
  return (int)((volatile const unsigned*)d.flags)[256 + src * d.EL + le];
}

struct MoePushEpi {       // down GEMM: finished rows go straight back to the source's return window
  const int* meta; __nv_bfloat16* yret; long long H; long long rows_end; unsigned* returned;
  __device__ __forceinline__ void begin_epilogue(int, int) const {}
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    if (row < rows_end) *reinterpret_cast<int4*>(yret + (long long)meta[row] * H + col) = v;
  }
  __device__ __forceinline__ void tile_done(int, int) const {
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) cuco_atomic_add_release_sys(returned, 1u);
  }
};

// grid (N / 128, T / 128, segments): tile (x, y) of segment z0 + z; kPush: the down GEMM (push back), else the
// gate/up GEMM into G. A, out: capacity layouts (segment * T + slot rows).
template <bool kPush>
__global__ void __launch_bounds__(cuco_gemm::THREADS, 2)
moe_expert_gemm(MoeDev d, const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ W, int N, int Kd,
                __nv_bfloat16* __restrict__ out, int z0) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int s_rows;
  int le, src;
  const int seg = moe_segment(d, z0 + blockIdx.z, le, src);
  if (threadIdx.x == 0) {
    if (!kPush) cuco_wait_geq(d.flags + 64 + src, d.epoch, d.tmo, d.tflag);
    s_rows = moe_rows(d, src, le);
  }
  __syncthreads();
  const int rows = s_rows;
  if ((int)blockIdx.y * cuco_gemm::BM >= rows) return;
  const long long row0 = (long long)seg * d.T + (long long)blockIdx.y * cuco_gemm::BM;
  float acc[4][4][4];
  cuco_gemm::zero_acc(acc);
  cuco_gemm::tile_mainloop(smem_raw, A + row0 * Kd, W + ((long long)le * N + (long long)blockIdx.x * cuco_gemm::BN) * Kd,
                           Kd, Kd, Kd / cuco_gemm::BK, acc);
  const int tm = (int)(row0 / cuco_gemm::BM);
  if (kPush) {
    MoePushEpi e{d.meta, d.peers.yret[src], N, (long long)seg * d.T + rows, d.peers.flags[src] + 1000};
    cuco_gemm::tile_epilogue(smem_raw, acc, tm, blockIdx.x, e);
  } else {
    cuco_gemm::StoreEpi e{out, N};
    cuco_gemm::tile_epilogue(smem_raw, acc, tm, blockIdx.x, e);
  }
}

// h = swiglu(G) over the rows that arrived in each segment (grid.y = segment - z0)
__global__ void moe_swiglu_segments(MoeDev d, const __nv_bfloat16* __restrict__ G, long long F, __nv_bfloat16* __restrict__ h,
                                    int z0) {
  int le, src;
  const int seg = moe_segment(d, z0 + blockIdx.y, le, src);
  const long long n = (long long)moe_rows(d, src, le) * F, base = (long long)seg * d.T;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long r = base + i / F, f = i % F;
    float g = __bfloat162float(G[r * 2 * F + f]), u = __bfloat162float(G[r * 2 * F + F + f]);
    h[r * F + f] = __float2bfloat16(moe::silu(g) * u);
  }
}
__global__ void moe_recv_segments(MoeDev d, int K, unsigned* __restrict__ recv) {
  int le, src;
  const int seg = moe_segment(d, blockIdx.y, le, src);
  const int rows = moe_rows(d, src, le);
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
    atomicAdd(recv + (long long)le * d.n * d.T + (long long)src * d.T + d.meta[(long long)seg * d.T + r] / K, 1u);
}
// The source waits (bounded) until every tile of its rows is back: sum over (dest, le) of m-tiles * n-tiles.
__global__ void moe_wait_returned(MoeDev d, const int* sendcnt, long long H, unsigned* ret_base) {
  if (threadIdx.x != 0) return;
  unsigned expect = 0;
  for (int e = 0; e < d.EL * d.n; e++) expect += (unsigned)((sendcnt[e] + 127) / 128) * (unsigned)(H / 128);
  const unsigned target = *ret_base + expect;
  cuco_wait_geq(d.flags + 1000, target, d.tmo, d.tflag);
  *ret_base = target;
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=lsa placement=local_first sync=source_counters issuer=warp
constexpr int kDispatchCtas = 32;  // cuco:knob dispatch_ctas
struct MoeState {
  moe::Shape s;
  long long cap;                     // rows of the receive window: EL * n * T
  void *xr, *meta, *yret, *flags;
  ncclWindow_t xw, mw, yw, fw;
  MoePeers peers;
  int *poscnt, *sendcnt, *iota;
  unsigned *done, *ret_base;
  float* weight;
  __nv_bfloat16 *g, *h;
  unsigned epoch;
  cudaStream_t side;                 // high priority: the remote rows' dispatch
  cudaEvent_t ev_routed, ev_sent;
};

static int impl_setup(cuco_ctx* ctx) {
  MoeState* st = new MoeState();
  ctx->state = st;
  moe::Shape s = st->s = moe_shape(ctx);
  if (s.n > kMoeMaxRanks) { snprintf(ctx->error, sizeof ctx->error, "at most %d ranks", kMoeMaxRanks); return 1; }
  const long long TK = s.T * s.K, E = s.E();
  st->cap = s.EL * s.n * s.T;
  CUCO_NK(ncclMemAlloc(&st->xr, st->cap * s.H * 2));
  CUCO_NK(ncclMemAlloc(&st->meta, st->cap * 4));
  CUCO_NK(ncclMemAlloc(&st->yret, TK * s.H * 2));
  CUCO_NK(ncclMemAlloc(&st->flags, 4096));
  CUCO_CK(cudaMemset(st->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->xr, st->cap * s.H * 2, &st->xw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->meta, st->cap * 4, &st->mw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->yret, TK * s.H * 2, &st->yw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->flags, 4096, &st->fw, NCCL_WIN_COLL_SYMMETRIC));
  MoePeers* d;
  CUCO_CK(cudaMalloc(&d, sizeof(MoePeers)));
  moe_resolve<<<1, 1>>>(st->xw, st->mw, st->yw, st->fw, s.n, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&st->peers, d, sizeof(MoePeers), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  CUCO_CK(cudaMalloc(&st->poscnt, E * sizeof(int)));
  CUCO_CK(cudaMemset(st->poscnt, 0, E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->sendcnt, E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->iota, TK * sizeof(int)));
  moe_iota<<<256, 256>>>(st->iota, TK);
  CUCO_CK(cudaMalloc(&st->done, 3 * sizeof(unsigned)));   // pass 0, pass 1, returned-tile base
  CUCO_CK(cudaMemset(st->done, 0, 3 * sizeof(unsigned)));
  st->ret_base = st->done + 2;
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&st->side, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_routed, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_sent, cudaEventDisableTiming));
  CUCO_CK(cudaMalloc(&st->weight, TK * sizeof(float)));
  CUCO_CK(cudaMalloc(&st->g, st->cap * 2 * s.F * 2));
  CUCO_CK(cudaMalloc(&st->h, st->cap * s.F * 2));
  CUCO_CK(cudaFuncSetAttribute(moe_expert_gemm<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  CUCO_CK(cudaFuncSetAttribute(moe_expert_gemm<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  CUCO_CK(cudaDeviceSynchronize());
  st->epoch = 0;
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  const moe::Shape& s = st->s;
  const int local = (int)s.EL, remote = (int)(s.EL * (s.n - 1)), segs = (int)(s.EL * s.n);
  const int ctas = kDispatchCtas < 1 ? 1 : kDispatchCtas;
  MoeDev d{(int)s.T, (int)s.EL, s.n, s.rank, ++st->epoch, (const unsigned*)st->flags, (const int*)st->meta,
           st->peers, ctx->spin_timeout_ns, ctx->timeout_flag};
  int* route = (int*)ctx->outputs[1].ptr;
  unsigned* recv = (unsigned*)ctx->outputs[2].ptr;
  const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
  const __nv_bfloat16* W1 = (const __nv_bfloat16*)ctx->inputs[2].ptr;
  const __nv_bfloat16* W2 = (const __nv_bfloat16*)ctx->inputs[3].ptr;
  const dim3 up_tiles((unsigned)(2 * s.F / 128), (unsigned)(s.T / 128)), down_tiles((unsigned)(s.H / 128), (unsigned)(s.T / 128));
  moe::route_topk<<<(int)((s.T + 127) / 128), 128, 0, ctx->stream>>>((const __nv_bfloat16*)ctx->inputs[1].ptr, (int)s.T,
                                                                    (int)s.E(), (int)s.K, route, st->weight);
  moe_ready<<<1, 32, 0, ctx->stream>>>(st->peers, s.rank, s.n, d.epoch);
  CUCO_CK(cudaEventRecord(st->ev_routed, ctx->stream));
  if (s.n > 1) {   // the remote rows, pushed while this rank computes its own
    CUCO_CK(cudaStreamWaitEvent(st->side, st->ev_routed, 0));
    moe_lsa_dispatch<<<ctas, 256, 0, st->side>>>(d, X, route, (int)s.K, s.H, st->poscnt, st->sendcnt, st->done, 1);
    CUCO_CK(cudaGetLastError());
  }
  CUCO_CK(cudaEventRecord(st->ev_sent, st->side));
  // own rows (dispatch_ctas CTAs here too: with two CTAs per SM this copy took 354 us against 273 at 64 CTAs,
  // its warps' slot counters contended and the side stream's pass competing)
  moe_lsa_dispatch<<<ctas, 256, 0, ctx->stream>>>(d, X, route, (int)s.K, s.H, st->poscnt, st->sendcnt, st->done, 0);
  // own rows' gate/up and SwiGLU, then the other sources' (each GEMM CTA after its source's counter), then
  // the others' down GEMM, pushing their results home while the own rows' down GEMM runs last: the peers'
  // waits for their tiles end before this rank's last kernel does
  moe_expert_gemm<false><<<dim3(up_tiles.x, up_tiles.y, local), cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, ctx->stream>>>(
      d, (const __nv_bfloat16*)st->xr, W1, (int)(2 * s.F), (int)s.H, st->g, 0);
  moe_swiglu_segments<<<dim3(256, local), 256, 0, ctx->stream>>>(d, st->g, s.F, st->h, 0);
  if (remote > 0) {
    moe_expert_gemm<false><<<dim3(up_tiles.x, up_tiles.y, remote), cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, ctx->stream>>>(
        d, (const __nv_bfloat16*)st->xr, W1, (int)(2 * s.F), (int)s.H, st->g, local);
    moe_swiglu_segments<<<dim3(256, remote), 256, 0, ctx->stream>>>(d, st->g, s.F, st->h, local);
    moe_expert_gemm<true><<<dim3(down_tiles.x, down_tiles.y, remote), cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, ctx->stream>>>(
        d, st->h, W2, (int)s.H, (int)s.F, nullptr, local);
  }
  moe_expert_gemm<true><<<dim3(down_tiles.x, down_tiles.y, local), cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, ctx->stream>>>(
      d, st->h, W2, (int)s.H, (int)s.F, nullptr, 0);
  CUCO_CK(cudaMemsetAsync(recv, 0, ctx->outputs[2].bytes, ctx->stream));
  moe_recv_segments<<<dim3((unsigned)((s.T + 255) / 256), segs), 256, 0, ctx->stream>>>(d, (int)s.K, recv);
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, st->ev_sent, 0));   // sendcnt of the remote rows
  moe_wait_returned<<<1, 32, 0, ctx->stream>>>(d, st->sendcnt, s.H, st->ret_base);
  moe::combine_weighted<<<(int)s.T, 256, 0, ctx->stream>>>((const __nv_bfloat16*)st->yret, st->iota, st->weight, (int)s.K,
                                                          s.H, (__nv_bfloat16*)ctx->outputs[0].ptr);
  CUCO_CK(cudaGetLastError());
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, st->xw);
  ncclCommWindowDeregister(ctx->comm, st->mw);
  ncclCommWindowDeregister(ctx->comm, st->yw);
  ncclCommWindowDeregister(ctx->comm, st->fw);
  ncclMemFree(st->xr); ncclMemFree(st->meta); ncclMemFree(st->yret); ncclMemFree(st->flags);
  for (void* p : {(void*)st->poscnt, (void*)st->sendcnt, (void*)st->iota, (void*)st->done, (void*)st->weight,
                  (void*)st->g, (void*)st->h})
    cudaFree(p);
  cudaStreamDestroy(st->side);
  cudaEventDestroy(st->ev_routed); cudaEventDestroy(st->ev_sent);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
