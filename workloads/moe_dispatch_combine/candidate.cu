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
// Device code of this candidate. The seed uses moe_common.cuh's kernels and the shared GEMM as they are.
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=host_nccl placement=sequential sync=stream issuer=host
// Host-driven, one stream: route, count, exchange the counts (grouped ncclSend/ncclRecv) and wait for
// them on the host, dispatch the rows (grouped ncclSend/ncclRecv per destination and local expert),
// run the local experts one after another, send the results back the same way, combine.
struct MoeState {
  moe::Shape s;
  long long cap;                   // rows the receive buffers hold (worst case, padded per expert)
  int *counts, *offsets, *chunk_cnt, *chunk_base, *pos, *src_token, *gid, *rcounts, *rids;
  float* weight;
  __nv_bfloat16 *xs, *ys, *xr, *yr, *g, *h;
  std::vector<int> hc, hrc;        // routes per expert sent / received (host copies)
  std::vector<long long> soff, roff, seg;   // send rows per (dest, le); receive rows per (le, src); segments per le
};

static int impl_setup(cuco_ctx* ctx) {
  MoeState* st = new MoeState();
  ctx->state = st;
  moe::Shape s = st->s = moe_shape(ctx);
  const long long TK = s.T * s.K, E = s.E(), nT = s.n * s.T;
  st->cap = (s.K < s.EL ? s.K : s.EL) * nT + 128 * s.EL;
  CUCO_CK(cudaMalloc(&st->counts, E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->offsets, (E + 1) * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->chunk_cnt, moe::route_chunks(TK) * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->chunk_base, moe::route_chunks(TK) * E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->pos, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->src_token, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->gid, TK * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->rcounts, E * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->rids, st->cap * sizeof(int)));
  CUCO_CK(cudaMalloc(&st->weight, TK * sizeof(float)));
  CUCO_CK(cudaMalloc(&st->xs, TK * s.H * 2));
  CUCO_CK(cudaMalloc(&st->ys, TK * s.H * 2));
  CUCO_CK(cudaMalloc(&st->xr, st->cap * s.H * 2));
  CUCO_CK(cudaMalloc(&st->yr, st->cap * s.H * 2));
  CUCO_CK(cudaMemset(st->xr, 0, st->cap * s.H * 2));
  CUCO_CK(cudaMalloc(&st->g, moe::round128(nT) * 2 * s.F * 2));
  CUCO_CK(cudaMalloc(&st->h, moe::round128(nT) * s.F * 2));
  st->hc.assign(E, 0); st->hrc.assign(E, 0);
  st->soff.assign(E, 0); st->roff.assign(E, 0); st->seg.assign(s.EL + 1, 0);
  return 0;
}

// Routing and the send buffer: ROUTE, weights, rows grouped by expert (so by destination), their counts.
static int moe_route_and_pack(cuco_ctx* ctx, MoeState* st) {
  const moe::Shape& s = st->s;
  const long long TK = s.T * s.K, E = s.E();
  int* route = (int*)ctx->outputs[1].ptr;
  moe::route_topk<<<(int)((s.T + 127) / 128), 128, 0, ctx->stream>>>((const __nv_bfloat16*)ctx->inputs[1].ptr, (int)s.T, (int)E, (int)s.K, route, st->weight);
  CUCO_CK(moe::place_routes(route, TK, (int)s.K, (int)E, st->chunk_cnt, st->chunk_base, st->counts, st->offsets,
                            st->pos, st->src_token, st->gid, (int)(s.rank * s.T), ctx->stream));
  moe::gather_rows<<<(int)TK, 128, 0, ctx->stream>>>((const __nv_bfloat16*)ctx->inputs[0].ptr, st->src_token, (int)TK, s.H, st->xs);
  CUCO_CK(cudaGetLastError());
  return 0;
}

// Uneven counts first: every rank learns how many rows each source sends to each of its experts.
static int moe_exchange_counts(cuco_ctx* ctx, MoeState* st) {
  const moe::Shape& s = st->s;
  CUCO_NK(ncclGroupStart());
  for (int r = 0; r < s.n; r++) {
    CUCO_NK(ncclSend(st->counts + r * s.EL, s.EL, ncclInt32, r, ctx->comm, ctx->stream));
    CUCO_NK(ncclRecv(st->rcounts + r * s.EL, s.EL, ncclInt32, r, ctx->comm, ctx->stream));
  }
  CUCO_NK(ncclGroupEnd());
  CUCO_CK(cudaMemcpyAsync(st->hc.data(), st->counts, s.E() * sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
  CUCO_CK(cudaMemcpyAsync(st->hrc.data(), st->rcounts, s.E() * sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
  CUCO_CK(cudaStreamSynchronize(ctx->stream));
  long long acc = 0;
  for (long long e = 0; e < s.E(); e++) { st->soff[e] = acc; acc += st->hc[e]; }
  long long row = 0;   // receive layout: expert-major, sources in order, each expert padded to 128 rows
  for (int le = 0; le < s.EL; le++) {
    st->seg[le] = row;
    for (int r = 0; r < s.n; r++) { st->roff[le * s.n + r] = row; row += st->hrc[r * s.EL + le]; }
    row = st->seg[le] + moe::round128(row - st->seg[le]);
  }
  st->seg[s.EL] = row;
  return 0;
}

// rows out: to each rank r, per local expert le of r: `from` rows at send offsets; back: the reverse.
static int moe_all_to_all(cuco_ctx* ctx, MoeState* st, bool back) {
  const moe::Shape& s = st->s;
  const long long H = s.H;
  CUCO_NK(ncclGroupStart());
  for (int r = 0; r < s.n; r++)
    for (int le = 0; le < s.EL; le++) {
      long long cs = st->hc[r * s.EL + le], cr = st->hrc[r * s.EL + le];
      long long so = st->soff[r * s.EL + le], ro = st->roff[le * s.n + r];
      if (!back) {
        if (cs) { CUCO_NK(ncclSend(st->xs + so * H, cs * H, ncclBfloat16, r, ctx->comm, ctx->stream));
                  CUCO_NK(ncclSend(st->gid + so, cs, ncclInt32, r, ctx->comm, ctx->stream)); }
        if (cr) { CUCO_NK(ncclRecv(st->xr + ro * H, cr * H, ncclBfloat16, r, ctx->comm, ctx->stream));
                  CUCO_NK(ncclRecv(st->rids + ro, cr, ncclInt32, r, ctx->comm, ctx->stream)); }
      } else {
        if (cr) CUCO_NK(ncclSend(st->yr + ro * H, cr * H, ncclBfloat16, r, ctx->comm, ctx->stream));
        if (cs) CUCO_NK(ncclRecv(st->ys + so * H, cs * H, ncclBfloat16, r, ctx->comm, ctx->stream));
      }
    }
  CUCO_NK(ncclGroupEnd());
  return 0;
}

static int moe_experts(cuco_ctx* ctx, MoeState* st) {
  const moe::Shape& s = st->s;
  const __nv_bfloat16* W1 = (const __nv_bfloat16*)ctx->inputs[2].ptr;
  const __nv_bfloat16* W2 = (const __nv_bfloat16*)ctx->inputs[3].ptr;
  unsigned* recv = (unsigned*)ctx->outputs[2].ptr;
  CUCO_CK(cudaMemsetAsync(recv, 0, ctx->outputs[2].bytes, ctx->stream));
  for (int le = 0; le < s.EL; le++) {
    long long r0 = st->seg[le], rows = st->roff[le * s.n + s.n - 1] + st->hrc[(s.n - 1) * s.EL + le] - r0;
    if (rows == 0) continue;
    moe::count_received<<<(int)((rows + 255) / 256), 256, 0, ctx->stream>>>(st->rids + r0, (int)rows, s.n * s.T, le, recv);
    CUCO_CK(moe::expert_mlp(st->xr + r0 * s.H, W1 + (size_t)le * 2 * s.F * s.H, W2 + (size_t)le * s.H * s.F,
                            moe::round128(rows), s.H, s.F, st->g, st->h, st->yr + r0 * s.H, ctx->stream));
  }
  return 0;
}

static int moe_combine(cuco_ctx* ctx, MoeState* st) {
  moe::combine_weighted<<<(int)st->s.T, 256, 0, ctx->stream>>>(st->ys, st->pos, st->weight, (int)st->s.K, st->s.H,
                                                              (__nv_bfloat16*)ctx->outputs[0].ptr);
  CUCO_CK(cudaGetLastError());
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  return moe_route_and_pack(ctx, st) || moe_exchange_counts(ctx, st) || moe_all_to_all(ctx, st, false) ||
         moe_experts(ctx, st) || moe_all_to_all(ctx, st, true) || moe_combine(ctx, st);
}

static int impl_teardown(cuco_ctx* ctx) {
  MoeState* st = (MoeState*)ctx->state;
  cudaDeviceSynchronize();
  for (void* p : {(void*)st->counts, (void*)st->offsets, (void*)st->chunk_cnt, (void*)st->chunk_base, (void*)st->pos, (void*)st->src_token, (void*)st->gid,
                  (void*)st->rcounts, (void*)st->rids, (void*)st->weight, (void*)st->xs, (void*)st->ys,
                  (void*)st->xr, (void*)st->yr, (void*)st->g, (void*)st->h})
    cudaFree(p);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
