// kv_transfer candidate: the prefill rank (0) computes L layers, KV_l = X * W_l^T (bf16, fp32 accumulate),
// into its KV cache (L x T x E); the decode rank (1) must end with the same KV cache. Only the
// EVOLVE-BLOCKs change; the harness (../_harness/cuda) calls the cuco_candidate_* functions at the bottom.
// ctx->inputs[0] = X (T x D), ctx->inputs[1] = W (L x E x D), ctx->outputs[0] = KV; all NCCL symmetric windows.
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
// Per-layer-group copy-engine transfer released by device counters: the layers' GEMMs are launched back
// to back on the main stream (nothing between them); each tile's epilogue counts itself in its layer
// group's counter (a release fence, then an atomic). A high-priority copy stream waits for each group's
// count with a stream memory operation (cuStreamWaitValue32: no kernel, no SM, no host round trip),
// copies the group to the decode rank's cache with the copy engine (DMA over NVLink) and raises the
// group's "landed" flag there with a stream write (cuStreamWriteValue32 to the peer's flag word, which
// fences the copy before the write). Cross-rank waits are bounded one-thread kernels; the stream waits
// only wait for this GPU's own GEMMs, which wait for nothing.
// The last lsa_tail layer groups (knob) skip the copy engine: their epilogue stores each tile into the
// decode rank's cache too (16-byte LSA stores) and the group's last tile raises its "landed" flag from the
// device, so after the last GEMM only a flag store is left instead of a copy and a stream write.
// Flag window (NCCL symmetric, 4 KiB) of each rank: word 0 = "decode is ready" (on the prefill rank),
// words 64 + g = "layer group g has landed" (on the decode rank). Values are call epochs (monotonic).
struct KvPeer {
  __nv_bfloat16* kv;            // the other rank's KV cache (LSA address)
  unsigned* ready;              // word 0 of the other rank's flag window
  unsigned* landed;             // word 64 of the other rank's flag window
};
__global__ void kv_resolve_peer(ncclWindow_t kvwin, ncclWindow_t fwin, int other, KvPeer* out) {
  KvPeer p;
  p.kv = (__nv_bfloat16*)ncclGetPeerPointer(kvwin, 0, other);
  p.ready = (unsigned*)ncclGetPeerPointer(fwin, 0, other);
  p.landed = (unsigned*)ncclGetPeerPointer(fwin, 64 * sizeof(unsigned), other);
  *out = p;
}
// Decode side: say "ready" to the prefill rank, then wait (bounded) for every layer group to land. A real
// decoder would start on layer group g as soon as its flag is raised.
__global__ void kv_decode_wait(KvPeer prefill, const unsigned* my_flags, int groups, unsigned epoch,
                               unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x != 0) return;
  cuco_st_release_sys(prefill.ready, epoch);
  for (int g = 0; g < groups; g++)
    if (!cuco_wait_geq(my_flags + 64 + g, epoch, tmo, tflag)) return;
}
// Prefill side: wait (bounded) for the decode rank's "ready", then note this call's epoch in a local word
// for the LSA tail tiles.
__global__ void kv_wait_ready(const unsigned* my_flags, unsigned* ready_local, unsigned epoch,
                              unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x == 0 && cuco_wait_geq(my_flags + 0, epoch, tmo, tflag)) cuco_st_release_sys(ready_local, epoch);
}
// Stores the tile in the local cache and counts it in its layer group's counter (a GPU-scope fence: the
// copy engine reads through the same L2). With `remote` set (an LSA tail group) the tile also goes to the
// decode rank's cache, and the group's last tile raises its "landed" flag there.
struct GroupCountEpi {
  __nv_bfloat16* local; long long ldc;
  unsigned* count;
  __nv_bfloat16* remote;        // the same layer in the decode rank's cache, or null (copy engine)
  unsigned* landed;             // the group's flag on the decode rank (LSA tail only)
  const unsigned* ready_local;
  unsigned target, epoch;       // the group's count when it is complete
  unsigned long long tmo; unsigned* tflag;
  __device__ __forceinline__ void begin_epilogue(int, int) const {
    if (!remote) return;
    if (threadIdx.x == 0) cuco_wait_geq(ready_local, epoch, tmo, tflag);
    __syncthreads();
  }
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    long long off = (long long)row * ldc + col;
    *reinterpret_cast<int4*>(local + off) = v;
    if (remote) *reinterpret_cast<int4*>(remote + off) = v;
  }
  __device__ __forceinline__ void tile_done(int, int) const {
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (!remote) { __threadfence(); atomicAdd(count, 1u); return; }
    __threadfence_system();
    if (atomicAdd(count, 1u) + 1u == target) cuco_st_release_sys(landed, epoch);
  }
};
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=stream_overlap sync=tile_counters issuer=host
constexpr int kLayersPerChunk = 1;  // cuco:knob layers_per_chunk
constexpr int kCommPriority = 1;    // cuco:knob comm_priority
constexpr int kLsaTail = 1;         // cuco:knob lsa_tail
struct KvState {
  long long L, T, D, E;
  int lpc, groups, tail_groups;
  unsigned tiles_per_group_layer;  // tiles of one layer's GEMM
  void* flags; ncclWindow_t fwin;
  unsigned* counters;              // per layer group: finished tiles, monotonic over calls; 255: decode ready
  KvPeer other;
  unsigned epoch;
  cudaStream_t comm;
  cudaEvent_t ev_start, ev_done;
};

static int impl_setup(cuco_ctx* ctx) {
  KvState* s = new KvState();
  ctx->state = s;
  s->L = cuco_param_get(ctx, "L", 0); s->T = cuco_param_get(ctx, "T", 0); s->D = cuco_param_get(ctx, "D", 0); s->E = cuco_param_get(ctx, "E", 0);
  s->lpc = kLayersPerChunk < 1 ? 1 : (kLayersPerChunk > (int)s->L ? (int)s->L : kLayersPerChunk);
  s->groups = (int)((s->L + s->lpc - 1) / s->lpc);
  s->tail_groups = kLsaTail < 0 ? 0 : (kLsaTail > s->groups ? s->groups : kLsaTail);
  s->tiles_per_group_layer = (unsigned)((s->T / cuco_gemm::BM) * (s->E / cuco_gemm::BN));
  CUCO_NK(ncclMemAlloc(&s->flags, 4096));
  CUCO_CK(cudaMemset(s->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, s->flags, 4096, &s->fwin, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_CK(cudaMalloc(&s->counters, 256 * sizeof(unsigned)));
  CUCO_CK(cudaMemset(s->counters, 0, 256 * sizeof(unsigned)));
  KvPeer* d; CUCO_CK(cudaMalloc(&d, sizeof(KvPeer)));
  kv_resolve_peer<<<1, 1>>>(ctx->outputs[0].win, s->fwin, 1 - ctx->rank, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&s->other, d, sizeof(KvPeer), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&s->comm, cudaStreamNonBlocking, kCommPriority ? hi : lo));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_done, cudaEventDisableTiming));
  CUCO_CK(cudaFuncSetAttribute(cuco_gemm::gemm_kernel<GroupCountEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  s->epoch = 0;
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  s->epoch++;
  if (ctx->rank == 1) {
    kv_decode_wait<<<1, 32, 0, ctx->stream>>>(s->other, (const unsigned*)s->flags, s->groups, s->epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
    CUCO_CK(cudaGetLastError());
    return 0;
  }
  const size_t layer = (size_t)s->T * s->E;
  const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
  const __nv_bfloat16* W = (const __nv_bfloat16*)ctx->inputs[1].ptr;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  CUCO_CK(cudaEventRecord(s->ev_start, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(s->comm, s->ev_start, 0));
  kv_wait_ready<<<1, 32, 0, s->comm>>>((const unsigned*)s->flags, s->counters + 255, s->epoch, ctx->spin_timeout_ns,
                                       ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  const int ce_groups = s->groups - s->tail_groups;
  for (long long l = 0; l < s->L; l++) {
    const int g = (int)(l / s->lpc);
    const long long l0 = (long long)g * s->lpc, l1 = l0 + s->lpc < s->L ? l0 + s->lpc : s->L;
    GroupCountEpi epi;
    epi.local = KV + l * layer; epi.ldc = s->E; epi.count = s->counters + g;
    epi.remote = g >= ce_groups ? s->other.kv + l * layer : nullptr;
    epi.landed = s->other.landed + g; epi.ready_local = s->counters + 255;
    epi.target = s->epoch * (unsigned)(l1 - l0) * s->tiles_per_group_layer; epi.epoch = s->epoch;
    epi.tmo = ctx->spin_timeout_ns; epi.tflag = ctx->timeout_flag;
    CUCO_CK(cuco_gemm::launch(X, W + (size_t)l * s->E * s->D, (int)s->E, (int)s->D, s->D, s->D, 0,
                              (int)(s->T / cuco_gemm::BM), epi, ctx->stream));
  }
  for (int g = 0; g < ce_groups; g++) {
    long long l0 = (long long)g * s->lpc, l1 = l0 + s->lpc < s->L ? l0 + s->lpc : s->L;
    CUresult r = cuco_stream_wait_value32((CUstream)s->comm, (CUdeviceptr)(s->counters + g),
                               s->epoch * (unsigned)(l1 - l0) * s->tiles_per_group_layer, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) { snprintf(ctx->error, sizeof ctx->error, "cuStreamWaitValue32: error %d", (int)r); return 1; }
    CUCO_CK(cudaMemcpyAsync(s->other.kv + l0 * layer, KV + l0 * layer, (size_t)(l1 - l0) * layer * 2, cudaMemcpyDeviceToDevice, s->comm));
    r = cuco_stream_write_value32((CUstream)s->comm, (CUdeviceptr)(s->other.landed + g), s->epoch, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) { snprintf(ctx->error, sizeof ctx->error, "cuStreamWriteValue32: error %d", (int)r); return 1; }
  }
  CUCO_CK(cudaEventRecord(s->ev_done, s->comm));
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, s->ev_done, 0));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, s->fwin);
  ncclMemFree(s->flags);
  cudaFree(s->counters);
  cudaStreamDestroy(s->comm);
  cudaEventDestroy(s->ev_start); cudaEventDestroy(s->ev_done);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
