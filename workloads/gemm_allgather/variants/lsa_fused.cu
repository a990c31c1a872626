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
// Fused: the GEMM's epilogue stores every finished 128x128 tile into this rank's block of C and, with
// 16-byte LSA stores over NVLink, into the same place in every peer's C. The first tile raises this
// rank's "ready" flag at every peer; every tile waits (bounded) for the peers' ready flags before its
// first remote store; the last tile to finish (a counter) raises "done" at every peer and waits for
// theirs. One kernel launch per call; no SMs are set aside for communication.
// Peers of this rank, in staggered order (rank+1, rank+2, ...), resolved once in setup from the NCCL
// windows (LSA pointers are plain device addresses in this process).
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

struct FusedPushEpi {
  __nv_bfloat16* local;         // this rank's block in its own C
  GaPeers P;
  const unsigned* my_flags;     // this rank's flag window
  unsigned* tiles_done;         // local counter of finished tiles (monotonic over calls)
  unsigned epoch, total_tiles;
  long long ldc;
  unsigned long long tmo; unsigned* tflag;

  __device__ __forceinline__ void begin_epilogue(int tm, int tn) const {
    if (threadIdx.x == 0) {
      if (tm == 0 && tn == 0)
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
      unsigned old = atomicAdd(tiles_done, 1u);
      if (old + 1u == epoch * total_tiles) {  // the last tile of this call, on this rank
        __threadfence_system();
        ga_flag_exchange(P, P.end_slot, my_flags, 1, epoch, tmo, tflag);
      }
    }
  }
};
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=lsa placement=fused sync=barrier issuer=thread
struct GaState {
  long long M, N, K;
  void* flags; ncclWindow_t fwin;
  unsigned* counters;
  GaPeers peers;
  unsigned epoch;
};

static int impl_setup(cuco_ctx* ctx) {
  GaState* s = new GaState();
  ctx->state = s;
  s->M = cuco_param_get(ctx, "M", 0); s->N = cuco_param_get(ctx, "N", 0); s->K = cuco_param_get(ctx, "K", 0);
  if (ctx->nranks > 8) { snprintf(ctx->error, sizeof ctx->error, "at most 8 ranks"); return 1; }
  CUCO_NK(ncclMemAlloc(&s->flags, 4096));
  CUCO_CK(cudaMemset(s->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, s->flags, 4096, &s->fwin, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_CK(cudaMalloc(&s->counters, 64 * sizeof(unsigned)));
  CUCO_CK(cudaMemset(s->counters, 0, 64 * sizeof(unsigned)));
  GaPeers* d; CUCO_CK(cudaMalloc(&d, sizeof(GaPeers)));
  ga_resolve_peers<<<1, 1>>>(ctx->outputs[0].win, s->fwin, ctx->rank, ctx->nranks, (size_t)s->M * s->N * 2, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&s->peers, d, sizeof(GaPeers), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  s->epoch = 0;
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  s->epoch++;
  const size_t blk = (size_t)s->M * s->N;
  FusedPushEpi epi;
  epi.local = (__nv_bfloat16*)ctx->outputs[0].ptr + (size_t)ctx->rank * blk;
  epi.P = s->peers;
  epi.my_flags = (const unsigned*)s->flags;
  epi.tiles_done = s->counters;
  epi.epoch = s->epoch;
  epi.total_tiles = (unsigned)((s->M / cuco_gemm::BM) * (s->N / cuco_gemm::BN));
  epi.ldc = s->N;
  epi.tmo = ctx->spin_timeout_ns; epi.tflag = ctx->timeout_flag;
  CUCO_CK(cuco_gemm::launch((const __nv_bfloat16*)ctx->inputs[0].ptr, (const __nv_bfloat16*)ctx->inputs[1].ptr,
                            (int)s->N, (int)s->K, s->K, s->K, 0, (int)(s->M / cuco_gemm::BM), epi, ctx->stream));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  GaState* s = (GaState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, s->fwin);
  ncclMemFree(s->flags);
  cudaFree(s->counters);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
