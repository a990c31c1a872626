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
// Copy-engine dispatch and combine, local tokens first: after one all-gather of every rank's counts (the
// host waits for it once), every rank knows every receiver's layout (per (local expert, source) segments,
// each padded to 128 rows). A high-priority stream copies each (destination, local expert) bucket of rows
// with cudaMemcpyAsync straight into the owner's receive window (DMA over NVLink, no SMs), this rank's
// own bucket first, and raises the owner's landed[src] flag with a one-thread kernel. The main stream
// computes the experts source by source in ring order, this rank's own rows first, each source after its
// flag (a bounded wait); as soon as a source's rows are done, their results are copied back into the
// source's return window the same way and its returned[me] flag raised; the combine waits for every source.
// Flag window of each rank (4 KiB of u32): [src] ready, [64 + src] landed, [128 + src] returned (epochs).
constexpr int kMoeMaxRanks = 16;
struct MoeCePeers {
  __nv_bfloat16* xr[kMoeMaxRanks];   // receive windows
  int* ids[kMoeMaxRanks];            // global token id of each received row
  __nv_bfloat16* ys[kMoeMaxRanks];   // return windows (the source's send order)
  unsigned* flags[kMoeMaxRanks];
};
__global__ void moe_ce_resolve(ncclWindow_t xw, ncclWindow_t iw, ncclWindow_t yw, ncclWindow_t fw, int n, MoeCePeers* out) {
  for (int p = 0; p < n; p++) {
    out->xr[p] = (__nv_bfloat16*)ncclGetPeerPointer(xw, 0, p);
    out->ids[p] = (int*)ncclGetPeerPointer(iw, 0, p);
    out->ys[p] = (__nv_bfloat16*)ncclGetPeerPointer(yw, 0, p);
    out->flags[p] = (unsigned*)ncclGetPeerPointer(fw, 0, p);
  }
}
__global__ void moe_ce_raise(unsigned* flag, unsigned epoch) {
  if (threadIdx.x == 0) { __threadfence_system(); cuco_st_release_sys(flag, epoch); }
}
__global__ void moe_ce_ready(MoeCePeers P, int me, int n, unsigned epoch) {
  if (threadIdx.x < n) cuco_st_release_sys(P.flags[threadIdx.x] + me, epoch);
}
__global__ void moe_ce_wait(const unsigned* flag, unsigned epoch, unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x == 0) cuco_wait_geq(flag, epoch, tmo, tflag);
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=local_first sync=source_counters issuer=host
struct MoeState {
  moe::Shape s;
  long long cap;                   // receive window rows: every (local expert, source) segment padded to 128
  int *counts, *offsets, *chunk_cnt, *chunk_base, *pos, *src_token, *gid, *allc;
  float* weight;
  __nv_bfloat16 *xs, *yr, *g, *h;
  void *xr, *ids, *ys, *flags;
  ncclWindow_t xw, iw, yw, fw;
  MoeCePeers peers;
  std::vector<int> hall;           // counts of every rank (n x E)
  unsigned epoch;
  cudaStream_t comm;
  cudaEvent_t ev_packed, ev_src[kMoeMaxRanks], ev_done;
};

// Row offsets: in rank r's send buffer, bucket e; in rank r's receive window, segment (le, src).
static long long moe_send_off(const MoeState* st, int r, long long e) {
  long long a = 0;
  for (long long x = 0; x < e; x++) a += st->hall[r * st->s.E() + x];
  return a;
}
static long long moe_recv_off(const MoeState* st, int r, int le, int src) {
  long long a = 0;
  for (int l = 0; l <= le; l++)
    for (int q = 0; q < st->s.n; q++) {
      if (l == le && q == src) return a;
      a += moe::round128(st->hall[q * st->s.E() + r * st->s.EL + l]);
    }
  return a;
}

static int impl_setup(cuco_ctx* ctx) {
  MoeState* st = new MoeState();
  ctx->state = st;
  moe::Shape s = st->s = moe_shape(ctx);
  if (s.n > kMoeMaxRanks) { snprintf(ctx->error, sizeof ctx->error, "at most %d ranks", kMoeMaxRanks); return 1; }
  const long long TK = s.T * s.K, E = s.E(), nT = s.n * s.T;
  st->cap = (s.K < s.EL ? s.K : s.EL) * nT + 128 * s.EL * s.n;
  CUCO_CK(cudaMalloc(&st->counts, E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->offsets, (E + 1) * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->chunk_cnt, moe::route_chunks(TK) * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->chunk_base, moe::route_chunks(TK) * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->pos, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->src_token, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->gid, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->allc, s.n * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->weight, TK * sizeof(float)));
  CUCO_CK(cudaMalloc(&st->xs, TK * s.H * 2));
  CUCO_CK(cudaMalloc(&st->yr, st->cap * s.H * 2));
  CUCO_CK(cudaMalloc(&st->g, moe::round128(s.T) * 2 * s.F * 2));
  CUCO_CK(cudaMalloc(&st->h, moe::round128(s.T) * s.F * 2));
  CUCO_NK(ncclMemAlloc(&st->xr, st->cap * s.H * 2));
  CUCO_NK(ncclMemAlloc(&st->ids, st->cap * sizeof(int)));
  CUCO_NK(ncclMemAlloc(&st->ys, TK * s.H * 2));
  CUCO_NK(ncclMemAlloc(&st->flags, 4096));
  CUCO_CK(cudaMemset(st->xr, 0, st->cap * s.H * 2));
  CUCO_CK(cudaMemset(st->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->xr, st->cap * s.H * 2, &st->xw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->ids, st->cap * sizeof(int), &st->iw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->ys, TK * s.H * 2, &st->yw, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_NK(ncclCommWindowRegister(ctx->comm, st->flags, 4096, &st->fw, NCCL_WIN_COLL_SYMMETRIC));
  MoeCePeers* d;
  CUCO_CK(cudaMalloc(&d, sizeof(MoeCePeers)));
  moe_ce_resolve<<<1, 1>>>(st->xw, st->iw, st->yw, st->fw, s.n, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&st->peers, d, sizeof(MoeCePeers), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  st->hall.assign(s.n * E, 0);
  st->epoch = 0;
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&st->comm, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_packed, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_done, cudaEventDisableTiming));
  for (int r = 0; r < s.n; r++) CUCO_CK(cudaEventCreateWithFlags(&st->ev_src[r], cudaEventDisableTiming));
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  const moe::Shape& s = st->s;
  const long long TK = s.T * s.K, E = s.E(), H = s.H;
  const unsigned epoch = ++st->epoch;
  const unsigned* my_flags = (const unsigned*)st->flags;
  int* route = (int*)ctx->outputs[1].ptr;
  unsigned* recv = (unsigned*)ctx->outputs[2].ptr;
  const __nv_bfloat16* W1 = (const __nv_bfloat16*)ctx->inputs[2].ptr;
  const __nv_bfloat16* W2 = (const __nv_bfloat16*)ctx->inputs[3].ptr;
  // route, pack (as the seed), and every rank's counts
  moe::route_topk<<<(int)((s.T + 127) / 128), 128, 0, ctx->stream>>>((const __nv_bfloat16*)ctx->inputs[1].ptr, (int)s.T, (int)E, (int)s.K, route, st->weight);
  CUCO_CK(moe::place_routes(route, TK, (int)s.K, (int)E, st->chunk_cnt, st->chunk_base, st->counts, st->offsets,
                            st->pos, st->src_token, st->gid, (int)(s.rank * s.T), ctx->stream));
  moe::gather_rows<<<(int)TK, 128, 0, ctx->stream>>>((const __nv_bfloat16*)ctx->inputs[0].ptr, st->src_token, (int)TK, H, st->xs);
  CUCO_NK(ncclAllGather(st->counts, st->allc, E, ncclInt32, ctx->comm, ctx->stream));
  CUCO_CK(cudaMemcpyAsync(st->hall.data(), st->allc, s.n * E * sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
  CUCO_CK(cudaStreamSynchronize(ctx->stream));
  moe_ce_ready<<<1, 32, 0, ctx->stream>>>(st->peers, s.rank, s.n, epoch);
  CUCO_CK(cudaEventRecord(st->ev_packed, ctx->stream));
  // dispatch: own bucket first, then the other ranks in ring order
  CUCO_CK(cudaStreamWaitEvent(st->comm, st->ev_packed, 0));
  for (int k = 0; k < s.n; k++) {
    const int dest = (s.rank + k) % s.n;
    moe_ce_wait<<<1, 32, 0, st->comm>>>(my_flags + dest, epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
    for (int le = 0; le < s.EL; le++) {
      const long long e = (long long)dest * s.EL + le, c = st->hall[s.rank * E + e];
      if (!c) continue;
      const long long so = moe_send_off(st, s.rank, e), ro = moe_recv_off(st, dest, le, s.rank);
      CUCO_CK(cudaMemcpyAsync(st->peers.xr[dest] + ro * H, st->xs + so * H, c * H * 2, cudaMemcpyDeviceToDevice, st->comm));
      CUCO_CK(cudaMemcpyAsync(st->peers.ids[dest] + ro, st->gid + so, c * sizeof(int), cudaMemcpyDeviceToDevice, st->comm));
    }
    moe_ce_raise<<<1, 32, 0, st->comm>>>(st->peers.flags[dest] + 64 + s.rank, epoch);
  }
  // experts, source by source (own rows first); each source's results go back as soon as they are done
  CUCO_CK(cudaMemsetAsync(recv, 0, ctx->outputs[2].bytes, ctx->stream));
  for (int k = 0; k < s.n; k++) {
    const int src = (s.rank + k) % s.n;
    moe_ce_wait<<<1, 32, 0, ctx->stream>>>(my_flags + 64 + src, epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
    for (int le = 0; le < s.EL; le++) {
      const long long c = st->hall[src * E + s.rank * s.EL + le], ro = moe_recv_off(st, s.rank, le, src);
      if (!c) continue;
      moe::count_received<<<(int)((c + 255) / 256), 256, 0, ctx->stream>>>((const int*)st->ids + ro, (int)c, s.n * s.T, le, recv);
      CUCO_CK(moe::expert_mlp((const __nv_bfloat16*)st->xr + ro * H, W1 + (size_t)le * 2 * s.F * H, W2 + (size_t)le * H * s.F,
                              moe::round128(c), H, s.F, st->g, st->h, st->yr + ro * H, ctx->stream));
    }
    CUCO_CK(cudaEventRecord(st->ev_src[src], ctx->stream));
    CUCO_CK(cudaStreamWaitEvent(st->comm, st->ev_src[src], 0));
    for (int le = 0; le < s.EL; le++) {
      const long long e = (long long)s.rank * s.EL + le, c = st->hall[src * E + e];
      if (!c) continue;
      const long long so = moe_send_off(st, src, e), ro = moe_recv_off(st, s.rank, le, src);
      CUCO_CK(cudaMemcpyAsync(st->peers.ys[src] + so * H, st->yr + ro * H, c * H * 2, cudaMemcpyDeviceToDevice, st->comm));
    }
    moe_ce_raise<<<1, 32, 0, st->comm>>>(st->peers.flags[src] + 128 + s.rank, epoch);
  }
  CUCO_CK(cudaEventRecord(st->ev_done, st->comm));
  for (int src = 0; src < s.n; src++)
    moe_ce_wait<<<1, 32, 0, ctx->stream>>>(my_flags + 128 + src, epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
  moe::combine_weighted<<<(int)s.T, 256, 0, ctx->stream>>>((const __nv_bfloat16*)st->ys, st->pos, st->weight, (int)s.K, H,
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
  ncclCommWindowDeregister(ctx->comm, st->yw);
  ncclCommWindowDeregister(ctx->comm, st->fw);
  ncclMemFree(st->xr); ncclMemFree(st->ids); ncclMemFree(st->ys); ncclMemFree(st->flags);
  for (void* p : {(void*)st->counts, (void*)st->offsets, (void*)st->chunk_cnt, (void*)st->chunk_base, (void*)st->pos,
                  (void*)st->src_token, (void*)st->gid, (void*)st->allc, (void*)st->weight, (void*)st->xs,
                  (void*)st->yr, (void*)st->g, (void*)st->h})
    cudaFree(p);
  cudaStreamDestroy(st->comm);
  cudaEventDestroy(st->ev_packed); cudaEventDestroy(st->ev_done);
  for (int r = 0; r < st->s.n; r++) cudaEventDestroy(st->ev_src[r]);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
