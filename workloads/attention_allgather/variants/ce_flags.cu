// attention_allgather candidate: context-parallel attention. Rank r holds positions [r*S/n, (r+1)*S/n)
// of the sequence (its Q, K, V); it must compute O = softmax(Q K^T / sqrt(128)) V of its queries over the
// whole sequence's keys (GQA: HQ query heads share HKV K/V heads; causal configs mask later keys).
// Only the EVOLVE-BLOCKs change; the harness (../_harness/cuda) calls the cuco_candidate_* functions at
// the bottom. attn_flash.cuh (frozen) holds the flash-style kernel any candidate may use.
// ctx->inputs: Q (S/n x HQ x 128), K, V (S/n x HKV x 128); ctx->outputs: O (S/n x HQ x 128); bf16, all
// NCCL symmetric windows.
#include "cuco_abi.h"
#include "cuco_device.cuh"
#include "cuco_gemm.cuh"
#include "attn_flash.cuh"
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <nccl.h>
#include <nccl_device.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CUCO_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, cudaGetErrorString(e_)); return 1; } } while (0)
#define CUCO_NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { snprintf(ctx->error, sizeof ctx->error, "%s: %s", #x, ncclGetErrorString(r_)); return 1; } } while (0)

static attn::Shape attn_shape(const cuco_ctx* ctx) {
  return attn::Shape{cuco_param_get(ctx, "S", 0), cuco_param_get(ctx, "HQ", 32), cuco_param_get(ctx, "HKV", 8),
                     cuco_param_get(ctx, "causal", 0), ctx->nranks, ctx->rank};
}

// EVOLVE-BLOCK-START kernels
// Pass-KV over the copy engines with one attention pass and no merge: the other ranks' K/V blocks are
// pulled (cudaMemcpy2DAsync from their input windows, DMA over NVLink, no SMs) on a high-priority stream,
// KV-head group by group, and after each group's copies a 4-byte copy of this call's epoch (from pinned host
// memory, so a copy engine and never an SM writes it) lands in that group's local flag. One attention
// kernel starts on the local block at once and waits (bounded) on each remote group's flag before loading
// it: a single online softmax over all blocks. No handshake and no kernel on the copy stream: the peers'
// inputs are valid for the whole call on every rank, and nothing an SM must run stands between a copy and
// its flag, so attention CTAs that spin on a flag can never keep the flag from being written. The kernel is
// launched before the copies are enqueued: at 1K tokens enqueueing them took longer than the copies
// themselves, and the GPU sat idle until the kernel's launch came.
__global__ void ce_resolve(ncclWindow_t kwin, ncclWindow_t vwin, int n, const __nv_bfloat16** out) {
  for (int p = 0; p < n; p++) {
    out[2 * p] = (const __nv_bfloat16*)ncclGetPeerPointer(kwin, 0, p);
    out[2 * p + 1] = (const __nv_bfloat16*)ncclGetPeerPointer(vwin, 0, p);
  }
}
// EVOLVE-BLOCK-END

// EVOLVE-BLOCK-START schedule
// cuco:design backend=copy_engine placement=fused merge=single_pass issuer=host
constexpr int kHeadGroups = 2;  // cuco:knob head_groups
constexpr int kEpochSlots = 64;    // pinned epoch values in flight (every call ends with the device idle)
struct AttnState {
  attn::Shape s;
  int groups;
  __nv_bfloat16 *kst, *vst;              // the other ranks' blocks, as they arrive ([S][HKV][128] layout)
  const __nv_bfloat16* peer[2 * attn::kMaxBlocks];   // every rank's K and V input windows (LSA addresses)
  unsigned* flags;                       // [block * groups + group]: the epoch whose copy has landed
  unsigned* epochs;                      // pinned host slots the flag copies read
  unsigned epoch;
  cudaStream_t comm;
  cudaEvent_t ev_start, ev_done;
};

static int impl_setup(cuco_ctx* ctx) {
  AttnState* st = new AttnState();
  ctx->state = st;
  attn::Shape& s = st->s;
  s = attn_shape(ctx);
  st->groups = kHeadGroups >= 1 && kHeadGroups <= 8 && s.HKV % kHeadGroups == 0 ? kHeadGroups : 1;
  CUCO_CK(cudaMalloc(&st->kst, s.kv_elems() * s.n * 2));
  CUCO_CK(cudaMalloc(&st->vst, s.kv_elems() * s.n * 2));
  CUCO_CK(cudaMalloc(&st->flags, attn::kMaxBlocks * 8 * sizeof(unsigned)));   // at most 8 head groups
  CUCO_CK(cudaMemset(st->flags, 0, attn::kMaxBlocks * 8 * sizeof(unsigned)));
  CUCO_CK(cudaMallocHost(&st->epochs, kEpochSlots * sizeof(unsigned)));
  const __nv_bfloat16** d;
  CUCO_CK(cudaMalloc(&d, sizeof st->peer));
  ce_resolve<<<1, 1>>>(ctx->inputs[1].win, ctx->inputs[2].win, s.n, d);
  CUCO_CK(cudaGetLastError());
  CUCO_CK(cudaMemcpy(st->peer, d, 2 * s.n * sizeof(void*), cudaMemcpyDeviceToHost));
  CUCO_CK(cudaFree(d));
  st->epoch = 0;
  int lo = 0, hi = 0;
  CUCO_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CUCO_CK(cudaStreamCreateWithPriority(&st->comm, cudaStreamNonBlocking, hi));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_start, cudaEventDisableTiming));
  CUCO_CK(cudaEventCreateWithFlags(&st->ev_done, cudaEventDisableTiming));
  CUCO_CK(cudaDeviceSynchronize());
  return 0;
}

static int impl_run(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  const attn::Shape& s = st->s;
  const long long kv = s.kv_elems();
  const int groups = st->groups;
  const unsigned epoch = ++st->epoch;
  unsigned* slot = st->epochs + epoch % kEpochSlots;
  *slot = epoch;                                 // read by this call's flag copies only
  const size_t row = (size_t)s.HKV * attn::D * 2, width = row / groups;
  CUCO_CK(cudaEventRecord(st->ev_start, ctx->stream));
  CUCO_CK(cudaStreamWaitEvent(st->comm, st->ev_start, 0));
  attn::KvList list{};
  list.b[list.n++] = attn::KvBlock{(const __nv_bfloat16*)ctx->inputs[1].ptr, (const __nv_bfloat16*)ctx->inputs[2].ptr,
                                   (int)(s.rank * s.S_loc()), (int)s.S_loc(), nullptr, 0u, 0};
  for (int k = 1; k < s.n; k++) {
    int j = (s.rank - k + s.n) % s.n;
    if (s.causal && j > s.rank) continue;
    attn::KvBlock b = attn::gathered_block(s, st->kst, st->vst, j);
    b.flag = st->flags + j * groups;
    b.target = epoch;
    b.heads_per_flag = (int)(s.HQ / groups);
    list.b[list.n++] = b;
  }
  attn::Args a = attn::args_for(s, (const __nv_bfloat16*)ctx->inputs[0].ptr, (__nv_bfloat16*)ctx->outputs[0].ptr,
                                ctx->spin_timeout_ns, ctx->timeout_flag);
  CUCO_CK(attn::launch(a, list, ctx->stream));
  for (int k = 1; k < s.n; k++) {          // pull in ring order: the previous rank's block first
    int j = (s.rank - k + s.n) % s.n;
    if (s.causal && j > s.rank) continue;  // all of its keys come after all of our queries
    if (groups == 1) {                     // whole blocks: two plain copies
      CUCO_CK(cudaMemcpyAsync(st->kst + j * kv, st->peer[2 * j], kv * 2, cudaMemcpyDeviceToDevice, st->comm));
      CUCO_CK(cudaMemcpyAsync(st->vst + j * kv, st->peer[2 * j + 1], kv * 2, cudaMemcpyDeviceToDevice, st->comm));
      CUCO_CK(cudaMemcpyAsync(st->flags + j, slot, sizeof(unsigned), cudaMemcpyHostToDevice, st->comm));
      continue;
    }
    for (int g = 0; g < groups; g++) {
      CUCO_CK(cudaMemcpy2DAsync((char*)(st->kst + j * kv) + g * width, row, (const char*)st->peer[2 * j] + g * width, row,
                                width, (size_t)s.S_loc(), cudaMemcpyDeviceToDevice, st->comm));
      CUCO_CK(cudaMemcpy2DAsync((char*)(st->vst + j * kv) + g * width, row, (const char*)st->peer[2 * j + 1] + g * width, row,
                                width, (size_t)s.S_loc(), cudaMemcpyDeviceToDevice, st->comm));
      CUCO_CK(cudaMemcpyAsync(st->flags + j * groups + g, slot, sizeof(unsigned), cudaMemcpyHostToDevice, st->comm));
    }
  }
  CUCO_CK(cudaEventRecord(st->ev_done, st->comm));
  CUCO_CK(cudaStreamWaitEvent(ctx->stream, st->ev_done, 0));
  return 0;
}

static int impl_teardown(cuco_ctx* ctx) {
  AttnState* st = (AttnState*)ctx->state;
  cudaDeviceSynchronize();
  cudaFree(st->kst); cudaFree(st->vst); cudaFree(st->flags);
  cudaFreeHost(st->epochs);
  cudaStreamDestroy(st->comm);
  cudaEventDestroy(st->ev_start); cudaEventDestroy(st->ev_done);
  delete st;
  ctx->state = nullptr;
  return 0;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_candidate_setup(cuco_ctx* ctx) { return impl_setup(ctx); }
extern "C" int cuco_candidate_run(cuco_ctx* ctx) { return impl_run(ctx); }
extern "C" int cuco_candidate_teardown(cuco_ctx* ctx) { return impl_teardown(ctx); }
