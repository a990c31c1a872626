// Kernel-level throughput of the two workloads' compute on one GPU: the expert GEMMs of
// moe_dispatch_combine (the shared tensor-core GEMM, cuco_gemm.cuh, on DeepSeek-V3 expert shapes) and the
// whole expert MLP (gate/up GEMM, SwiGLU, down GEMM: moe::expert_mlp), and attention_allgather's flash
// kernel (attn_flash.cuh) on the workload's head shape. Prints one JSON object per line:
//   {"kernel": ..., "shape": ..., "ms": median, "tflops": useful FLOPs / median time}
// Inputs are uniform random bf16; every timing is the median of --iters launches after 3 warm-ups, each
// launch bracketed by events on one stream. Build: tests/bench/bench_moe_attn_kernels.py.
#include "cuco_gemm.cuh"
#include "moe_common.cuh"
#include "attn_flash.cuh"
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)

__global__ void fill_random(__nv_bfloat16* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
    p[i] = __float2bfloat16(((x & 0xffffff) / 16777216.f * 2.f - 1.f) * scale);
  }
}
static __nv_bfloat16* random_bf16(size_t n, unsigned seed, float scale) {
  __nv_bfloat16* p; CK(cudaMalloc(&p, n * 2));
  fill_random<<<1024, 256>>>(p, n, seed, scale);
  CK(cudaGetLastError());
  return p;
}

static int g_iters = 21;
static double time_ms(cudaStream_t s, const std::function<void()>& launch) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < 3 + g_iters; i++) {
    CK(cudaEventRecord(a, s)); launch(); CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) t.push_back(ms);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a); cudaEventDestroy(b);
  return t[t.size() / 2];
}
static void report(const char* kernel, const char* shape, double ms, double flops) {
  printf("{\"kernel\": \"%s\", \"shape\": \"%s\", \"ms\": %.4f, \"tflops\": %.1f}\n", kernel, shape, ms, flops / ms / 1e9);
  fflush(stdout);
}

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], "--iters")) g_iters = atoi(argv[i + 1]);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("{\"gpu\": \"%s\", \"sm_count\": %d}\n", prop.name, prop.multiProcessorCount);

  // MoE expert shapes (H 7168, F 2048); M = rows one expert receives (4096: T 4096 per rank, top-8 of 16
  // experts on 2 ranks, balanced; 1024: a cold expert).
  const long long H = 7168, F = 2048;
  __nv_bfloat16* W1 = random_bf16(2 * F * H, 11, 3.f / 84.7f);
  __nv_bfloat16* W2 = random_bf16(H * F, 12, 3.f / 45.3f);
  for (long long M : {4096LL, 1024LL}) {
    __nv_bfloat16* X = random_bf16(M * H, 13, 1.f);
    __nv_bfloat16 *G, *Hm, *Y;
    CK(cudaMalloc(&G, M * 2 * F * 2)); CK(cudaMalloc(&Hm, M * F * 2)); CK(cudaMalloc(&Y, M * H * 2));
    char shape[96];
    snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", M, 2 * F, H);
    double ms = time_ms(s, [&] { cuco_gemm::StoreEpi e{G, 2 * F}; CK(cuco_gemm::launch(X, W1, (int)(2 * F), (int)H, H, H, 0, (int)(M / 128), e, s)); });
    report("moe_gate_up_gemm", shape, ms, 2.0 * M * 2 * F * H);
    snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", M, H, F);
    ms = time_ms(s, [&] { cuco_gemm::StoreEpi e{Y, H}; CK(cuco_gemm::launch(Hm, W2, (int)H, (int)F, F, F, 0, (int)(M / 128), e, s)); });
    report("moe_down_gemm", shape, ms, 2.0 * M * H * F);
    snprintf(shape, sizeof shape, "M=%lld H=%lld F=%lld", M, H, F);
    ms = time_ms(s, [&] { CK(moe::expert_mlp(X, W1, W2, M, H, F, G, Hm, Y, s)); });
    report("moe_expert_mlp", shape, ms, 2.0 * M * 3 * F * H);
    cudaFree(X); cudaFree(G); cudaFree(Hm); cudaFree(Y);
  }

  // Attention: HQ 32, HKV 8, head dim 128; q queries over k keys (one block of keys).
  struct A { long long q, k; int causal; };
  for (A c : {A{4096, 4096, 0}, A{4096, 4096, 1}, A{4096, 16384, 0}, A{1024, 4096, 0}}) {
    const long long HQ = 32, HKV = 8, D = attn::D;
    __nv_bfloat16* Q = random_bf16(c.q * HQ * D, 21, 2.f);
    __nv_bfloat16* K = random_bf16(c.k * HKV * D, 22, 2.f);
    __nv_bfloat16* V = random_bf16(c.k * HKV * D, 23, 1.f);
    __nv_bfloat16* O; CK(cudaMalloc(&O, c.q * HQ * D * 2));
    attn::Shape sh{c.k, HQ, HKV, c.causal, 1, 0};
    attn::Args a = attn::args_for(sh, Q, O, 1000000000ull, nullptr);
    a.q_len = (int)c.q;
    a.q_pos0 = (int)(c.k - c.q);            // the last c.q positions of the sequence
    attn::KvList kv{};
    kv.n = 1; kv.b[0] = attn::KvBlock{K, V, 0, (int)c.k, nullptr, 0u};
    double ms = time_ms(s, [&] { CK(attn::launch(a, kv, s)); });
    // useful FLOPs: 4 * HQ * D per visible (query, key) pair (QK^T and PV)
    double pairs = c.causal ? (double)c.q * (c.k - c.q) + (double)c.q * (c.q + 1) / 2 : (double)c.q * c.k;
    char shape[96];
    snprintf(shape, sizeof shape, "q=%lld k=%lld HQ=32 HKV=8 D=128%s", c.q, c.k, c.causal ? " causal" : "");
    report("attn_flash", shape, ms, 4.0 * HQ * D * pairs);
    cudaFree(Q); cudaFree(K); cudaFree(V); cudaFree(O);
  }
  return 0;
}
