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
// The copy engines of both GPUs: layer chunks are dealt round robin over "lanes", ce_streams push lanes
// on the prefill rank (copy streams that write the decode rank's cache, as ce_spread's) and ce_pull pull
// lanes on the decode rank (copy streams there that read the prefill rank's cache into their own), so each
// GPU's copy engines carry part of the cache. The prefill rank's first API call is its first GEMM, and its
// GEMMs run back to back on the main stream, two layers ahead of the push copies' host work. Each tile's
// epilogue counts itself: in its chunk's counter here (a push chunk: a GPU-scope fence, then an atomic;
// a push stream waits for the count with cuStreamWaitValue32, copies, and bumps its progress word at the
// decode rank with cuStreamWriteValue32) or in the chunk's word at the decode rank (a pull chunk: a remote
// reduction with system-scope release after the CTA's barrier; a pull stream there waits for it with a
// bounded one-thread kernel, then copies). Each pull lane ends with a stream write of the epoch into its acknowledgement word
// at the prefill rank, which the prefill rank's call waits for (bounded) before it ends: its cache is not
// overwritten (the next call's poisoning) while the decode rank still reads it. Chunks taper (the last
// copied chunk is one layer); the last lsa_tail layers are pushed by their epilogue (16-byte LSA stores
// before the local ones, then a remote count per tile), as in ce_spread.
// Flag window (NCCL symmetric, 4 KiB) of each rank. On the prefill rank: word 0 = "decode is ready",
// words 8 + q = pull lane q's acknowledgement (epoch). On the decode rank: words 32 + i = push lane i's
// progress ((epoch - 1) * n_i + k once the k-th of its n_i chunks has landed), words 64 + l = LSA layer l's
// landed tiles, words 320 + c = pull chunk c's finished tiles at the prefill rank. All monotonic over calls.
struct KvPeer {
  __nv_bfloat16* kv;            // the other rank's KV cache (LSA address)
  unsigned* flags;              // word 0 of the other rank's flag window
};
__global__ void kv_resolve_peer(ncclWindow_t kvwin, ncclWindow_t fwin, int other, KvPeer* out) {
  KvPeer p;
  p.kv = (__nv_bfloat16*)ncclGetPeerPointer(kvwin, 0, other);
  p.flags = (unsigned*)ncclGetPeerPointer(fwin, 0, other);
  *out = p;
}
// What the decode rank's main stream waits for in one call: each push lane's progress, then each LSA
// layer's count (the pull lanes are its own streams, joined after).
struct KvDecodeTargets {
  unsigned progress[8];         // push lane i has landed all its chunks once its word reaches this
  unsigned lsa_count;           // an LSA layer has landed once its word reaches this
  int push_lanes, lsa0, L;      // LSA layers: [lsa0, L)
};
// Decode side: say "ready" to the prefill rank, then wait (bounded) for every pushed chunk and LSA layer.
// A real decoder would start on layer l as soon as every word covering it has been raised.
__global__ void kv_decode_wait(unsigned* prefill_flags, const unsigned* my_flags, const KvDecodeTargets t,
                               unsigned epoch, unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x != 0) return;
  cuco_st_release_sys(prefill_flags, epoch);
  for (int i = 0; i < t.push_lanes; i++)
    if (!cuco_wait_geq(my_flags + 32 + i, t.progress[i], tmo, tflag)) return;
  for (int l = t.lsa0; l < t.L; l++)
    if (!cuco_wait_geq(my_flags + 64 + l, t.lsa_count, tmo, tflag)) return;
}
// A bounded wait on one word, for a stream to go on once it is reached: a pull lane's chunk count on the
// decode rank, or on the prefill rank the pull lanes' acknowledgements (n words from `word`).
__global__ void kv_wait_words(const unsigned* word, int n, unsigned value, unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x != 0) return;
  for (int i = 0; i < n; i++)
    if (!cuco_wait_geq(word + i, value, tmo, tflag)) return;
}
// Prefill side: wait (bounded) for the decode rank's "ready", then note this call's epoch in a local word
// for the LSA layers' tiles.
__global__ void kv_wait_ready(const unsigned* my_flags, unsigned* ready_local, unsigned epoch,
                              unsigned long long tmo, unsigned* tflag) {
  if (threadIdx.x == 0 && cuco_wait_geq(my_flags + 0, epoch, tmo, tflag)) cuco_st_release_sys(ready_local, epoch);
}
// A remote count that nothing here waits for: a reduction, so the tile's CTA exits without the round trip.
static __device__ __forceinline__ void kv_red_add_release_sys(unsigned* p, unsigned v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
enum { KV_PUSH = 0, KV_PULL = 1, KV_LSA = 2 };
// Stores the tile in the local cache and counts it: a push chunk's counter here, a pull chunk's word at
// the decode rank (which reads the tile from here: the count is a system-scope release), or for an LSA
// layer the tile goes to the decode rank's cache first, then here, and is counted in the layer's word there.
struct LaneEpi {
  __nv_bfloat16* local; long long ldc;
  unsigned* count;              // push: the chunk's counter here; pull, LSA: the word at the decode rank
  __nv_bfloat16* remote;        // LSA: the same layer in the decode rank's cache
  const unsigned* ready_local;
  int mode;                     // KV_PUSH, KV_PULL or KV_LSA
  unsigned epoch; unsigned long long tmo; unsigned* tflag;
  __device__ __forceinline__ void begin_epilogue(int, int) const {
    if (mode != KV_LSA) return;
    if (threadIdx.x == 0) cuco_wait_geq(ready_local, epoch, tmo, tflag);
    __syncthreads();
  }
  __device__ __forceinline__ void store(int row, int col, int4 v) const {
    long long off = (long long)row * ldc + col;
    if (mode == KV_LSA) *reinterpret_cast<int4*>(remote + off) = v;
    *reinterpret_cast<int4*>(local + off) = v;
  }
  __device__ __forceinline__ void tile_done(int, int) const {
    if (mode == KV_LSA) {
      __threadfence_system();
      __syncthreads();
      if (threadIdx.x == 0) kv_red_add_release_sys(count, 1u);
      return;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (mode == KV_PUSH) { __threadfence(); atomicAdd(count, 1u); return; }
    kv_red_add_release_sys(count, 1u);   // a system-scope release: the CTA's stores (the barrier) come first
  }
};
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=push_pull sync=tile_counters issuer=host
constexpr int kLayersPerChunk = 1;  // cuco:knob layers_per_chunk
constexpr int kCommPriority = 1;    // cuco:knob comm_priority
constexpr int kLsaTail = 1;         // cuco:knob lsa_tail
constexpr int kCeStreams = 1;       // cuco:knob ce_streams
constexpr int kCePull = 1;          // cuco:knob ce_pull
constexpr int kGemmLead = 2;        // GEMMs launched this many layers ahead of the push copies' host work
constexpr int kMaxLanes = 8;
struct KvState {
  long long L, T, D, E;
  int lce;                          // layers sent by the copy engines: [0, lce); by LSA stores: [lce, L)
  int chunks, push, pull;           // chunks; push lanes (prefill streams) and pull lanes (decode streams)
  int chunk0[257];                  // chunk c = layers [chunk0[c], chunk0[c + 1]), on lane c % (push + pull)
  int chunk_of[256];                // a copied layer's chunk
  unsigned per_lane[kMaxLanes];     // chunks on each lane (push lanes first)
  int pull_used;                    // pull lanes with at least one chunk (the first ones)
  unsigned tiles;                   // tiles of one layer's GEMM
  void* flags; ncclWindow_t fwin;
  unsigned* counters;               // [c]: push chunk c's finished tiles; [1023]: decode ready
  KvPeer other;
  unsigned epoch;
  int nstreams;                     // this rank's copy streams: max(push, 1) on the prefill, pull on the decode
  cudaStream_t comm[kMaxLanes];
  cudaEvent_t ev_start, ev_ready, ev_done[kMaxLanes];
};

static int impl_setup(cuco_ctx* ctx) {
  KvState* s = new KvState();
  ctx->state = s;
  s->L = cuco_param_get(ctx, "L", 0); s->T = cuco_param_get(ctx, "T", 0); s->D = cuco_param_get(ctx, "D", 0); s->E = cuco_param_get(ctx, "E", 0);
  const int L = (int)s->L;
  const int lpc = kLayersPerChunk < 1 ? 1 : (kLayersPerChunk > L ? L : kLayersPerChunk);
  s->lce = L - (kLsaTail < 0 ? 0 : (kLsaTail > L ? L : kLsaTail));
  s->chunks = 0;
  if (s->lce > 0) {   // layers [0, lce - 1) in chunks of lpc, then the last copied layer alone
    for (int l = 0; l < s->lce - 1; l += lpc) s->chunk0[s->chunks++] = l;
    s->chunk0[s->chunks++] = s->lce - 1;
    s->chunk0[s->chunks] = s->lce;
    for (int c = 0; c < s->chunks; c++)
      for (int l = s->chunk0[c]; l < s->chunk0[c + 1]; l++) s->chunk_of[l] = c;
  }
  s->push = kCeStreams < 0 ? 0 : (kCeStreams > kMaxLanes / 2 ? kMaxLanes / 2 : kCeStreams);
  s->pull = kCePull < 0 ? 0 : (kCePull > kMaxLanes / 2 ? kMaxLanes / 2 : kCePull);
  if (s->push + s->pull == 0) s->push = 1;
  for (int c = 0; c < s->chunks; c++) s->per_lane[c % (s->push + s->pull)]++;
  s->pull_used = 0;
  for (int q = 0; q < s->pull; q++)
    if (s->per_lane[s->push + q] > 0) s->pull_used = q + 1;
  s->tiles = (unsigned)((s->T / cuco_gemm::BM) * (s->E / cuco_gemm::BN));
  CUCO_NK(ncclMemAlloc(&s->flags, 4096));
  CUCO_CK(cudaMemset(s->flags, 0, 4096));
  CUCO_CK(cudaDeviceSynchronize());
  CUCO_NK(ncclCommWindowRegister(ctx->comm, s->flags, 4096, &s->fwin, NCCL_WIN_COLL_SYMMETRIC));
  CUCO_CK(cudaMalloc(&s->counters, 1024 * sizeof(unsigned)));
  CUCO_CK(cudaMemset(s->counters, 0, 1024 * sizeof(unsigned)));
  KvPeer* d; CUCO_CK(cudaMalloc(&d, sizeof(KvPeer)));
  kv_resolve_peer<<<1, 1>>>(ctx->outputs[0].win, s->fwin, 1 - ctx->rank, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(&s->other, d, sizeof(KvPeer), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  s->nstreams = ctx->rank == 0 ? (s->push > 0 ? s->push : 1) : (s->pull_used > 0 ? s->pull_used : 1);
  for (int i = 0; i < s->nstreams; i++) {
    CUCO_CK(cudaStreamCreateWithPriority(&s->comm[i], cudaStreamNonBlocking, kCommPriority ? hi : lo));
    CUCO_CK(cudaEventCreateWithFlags(&s->ev_done[i], cudaEventDisableTiming));
  }
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&s->ev_ready, cudaEventDisableTiming));
  // set once here, so a call's launches are bare kernel launches
  CUCO_CK(cudaFuncSetAttribute(cuco_gemm::gemm_kernel<LaneEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  s->epoch = 0;
  return 0;
}

// Layer l's GEMM on the main stream, its epilogue counting it for its lane or pushing it (an LSA layer).
static int launch_layer(cuco_ctx* ctx, KvState* s, long long l) {
  const size_t layer = (size_t)s->T * s->E;
  const __nv_bfloat16* X = (const __nv_bfloat16*)ctx->inputs[0].ptr;
  const __nv_bfloat16* W = (const __nv_bfloat16*)ctx->inputs[1].ptr;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  LaneEpi epi;
  epi.local = KV + l * layer; epi.ldc = s->E;
  epi.ready_local = s->counters + 1023; epi.epoch = s->epoch;
  epi.tmo = ctx->spin_timeout_ns; epi.tflag = ctx->timeout_flag;
  epi.remote = nullptr;
  if (l >= s->lce) {
    epi.mode = KV_LSA; epi.remote = s->other.kv + l * layer; epi.count = s->other.flags + 64 + l;
  } else {
    const int c = s->chunk_of[l];
    const bool pull = c % (s->push + s->pull) >= s->push;
    epi.mode = pull ? KV_PULL : KV_PUSH;
    epi.count = pull ? s->other.flags + 320 + c : s->counters + c;
  }
  dim3 grid((unsigned)(s->E / cuco_gemm::BN), (unsigned)(s->T / cuco_gemm::BM));
  cuco_gemm::gemm_kernel<LaneEpi><<<grid, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, ctx->stream>>>(
      X, W + (size_t)l * s->E * s->D, (int)s->D, s->D, s->D, 0, epi);
  CUCO_CK(cudaGetLastError());
  return 0;
}

// Decode rank: raise "ready" and wait for the pushed chunks and LSA layers on the main stream; pull the
// pull lanes' chunks on its own copy streams (after the main stream's earlier work: the poisoning of the
// cache they write), each lane acknowledging its last chunk to the prefill rank; join them.
static int run_decode(cuco_ctx* ctx, KvState* s) {
  const unsigned epoch = s->epoch;
  const size_t layer = (size_t)s->T * s->E;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  if (s->pull_used > 0) {
    CUCO_CK(cudaEventRecord(s->ev_start, ctx->stream));
    for (int q = 0; q < s->pull_used; q++) CUCO_CK(cudaStreamWaitEvent(s->comm[q], s->ev_start, 0));
  }
  KvDecodeTargets t;
  t.push_lanes = s->chunks > 0 ? s->push : 0;
  for (int i = 0; i < kMaxLanes; i++) t.progress[i] = epoch * s->per_lane[i];
  t.lsa_count = epoch * s->tiles; t.lsa0 = s->lce; t.L = (int)s->L;
  kv_decode_wait<<<1, 32, 0, ctx->stream>>>(s->other.flags, (const unsigned*)s->flags, t, epoch, ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  const int lanes = s->push + s->pull;
  for (int c = 0; c < s->chunks; c++) {
    const int q = c % lanes - s->push;
    if (q < 0) continue;
    const long long l0 = s->chunk0[c], l1 = s->chunk0[c + 1];
    kv_wait_words<<<1, 32, 0, s->comm[q]>>>((const unsigned*)s->flags + 320 + c, 1, epoch * (unsigned)(l1 - l0) * s->tiles,
                                            ctx->spin_timeout_ns, ctx->timeout_flag);
    CUCO_CK(cudaGetLastError());
    CUCO_CK(cudaMemcpyAsync(KV + l0 * layer, s->other.kv + l0 * layer, (size_t)(l1 - l0) * layer * 2, cudaMemcpyDeviceToDevice, s->comm[q]));
  }
  for (int q = 0; q < s->pull_used; q++) {
    CUresult r = cuco_stream_write_value32((CUstream)s->comm[q], (CUdeviceptr)(s->other.flags + 8 + q), epoch, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) { snprintf(ctx->error, sizeof ctx->error, "cuStreamWriteValue32: error %d", (int)r); return 1; }
    CUCO_CK(cudaEventRecord(s->ev_done[q], s->comm[q]));
    CUCO_CK(cudaStreamWaitEvent(ctx->stream, s->ev_done[q], 0));
  }
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  s->epoch++;
  const unsigned epoch = s->epoch;
  if (ctx->rank == 1) return run_decode(ctx, s);
  const size_t layer = (size_t)s->T * s->E;
  __nv_bfloat16* KV = (__nv_bfloat16*)ctx->outputs[0].ptr;
  long long launched = 0;
  const long long first = kGemmLead < 1 ? 1 : (kGemmLead > s->L ? s->L : kGemmLead);
  for (; launched < first; launched++)
    if (launch_layer(ctx, s, launched)) return 1;
  kv_wait_ready<<<1, 32, 0, s->comm[0]>>>((const unsigned*)s->flags, s->counters + 1023, epoch, ctx->spin_timeout_ns,
                                          ctx->timeout_flag);
  CUCO_CK(cudaGetLastError());
  if (s->nstreams > 1) {   // no push before the decode rank is ready
    CUCO_CK(cudaEventRecord(s->ev_ready, s->comm[0]));
    for (int i = 1; i < s->nstreams; i++) CUCO_CK(cudaStreamWaitEvent(s->comm[i], s->ev_ready, 0));
  }
  const int lanes = s->push + s->pull;
  unsigned done[kMaxLanes] = {0};
  for (int c = 0; c < s->chunks; c++) {
    const long long l0 = s->chunk0[c], l1 = s->chunk0[c + 1];
    for (const long long upto = l1 + kGemmLead < s->L ? l1 + kGemmLead : s->L; launched < upto; launched++)
      if (launch_layer(ctx, s, launched)) return 1;
    const int i = c % lanes;
    if (i >= s->push) continue;   // a pull chunk: the decode rank's copy engines take it
    CUresult r = cuco_stream_wait_value32((CUstream)s->comm[i], (CUdeviceptr)(s->counters + c),
                               epoch * (unsigned)(l1 - l0) * s->tiles, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) { snprintf(ctx->error, sizeof ctx->error, "cuStreamWaitValue32: error %d", (int)r); return 1; }
    CUCO_CK(cudaMemcpyAsync(s->other.kv + l0 * layer, KV + l0 * layer, (size_t)(l1 - l0) * layer * 2, cudaMemcpyDeviceToDevice, s->comm[i]));
    done[i]++;
    r = cuco_stream_write_value32((CUstream)s->comm[i], (CUdeviceptr)(s->other.flags + 32 + i), (epoch - 1) * s->per_lane[i] + done[i],
                       CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) { snprintf(ctx->error, sizeof ctx->error, "cuStreamWriteValue32: error %d", (int)r); return 1; }
  }
  for (; launched < s->L; launched++)
    if (launch_layer(ctx, s, launched)) return 1;
  if (s->pull_used > 0) {   // the call ends only once the decode rank has read every pull chunk from here
    kv_wait_words<<<1, 32, 0, s->comm[0]>>>((const unsigned*)s->flags + 8, s->pull_used, epoch, ctx->spin_timeout_ns,
                                            ctx->timeout_flag);
    CUCO_CK(cudaGetLastError());
  }
  for (int i = 0; i < s->nstreams; i++) {
    CUCO_CK(cudaEventRecord(s->ev_done[i], s->comm[i]));
    CUCO_CK(cudaStreamWaitEvent(ctx->stream, s->ev_done[i], 0));
  }
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  KvState* s = (KvState*)ctx->state;
  cudaDeviceSynchronize();
  ncclCommWindowDeregister(ctx->comm, s->fwin);
  ncclMemFree(s->flags);
  cudaFree(s->counters);
  for (int i = 0; i < s->nstreams; i++) { cudaStreamDestroy(s->comm[i]); cudaEventDestroy(s->ev_done[i]); }
  cudaEventDestroy(s->ev_start); cudaEventDestroy(s->ev_ready);
  delete s;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
