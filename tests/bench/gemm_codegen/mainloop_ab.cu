// A B of cuco_gemm.cuh's mainloop against its first version (commit 931b2d1), one GPU: the plain and the
// split-K kernels on every workload's per-rank GEMM shapes (and a few tiny ones), interleaved (first, current
// per iteration, 256 MiB L2 flush before each, 41 timed of 46), medians; outputs compared bit for bit at the
// first and last iteration (split-K sums in the order its splits arrive, so 4-way split-K differs between
// calls of either version: the first version is compared with itself too). The first version, renamed:
//   git show 931b2d1:workloads/_harness/cuda/cuco_gemm.cuh | sed 's/namespace cuco_gemm {/namespace cuco_gemm_v1 {/;
//     s/CUCO_GEMM_CUH/CUCO_GEMM_V1_CUH/g' > /tmp/gemm_v1/cuco_gemm_v1.cuh
//   nvcc -std=c++17 -arch=sm_90 -O3 -Iworkloads/_harness/cuda -I/tmp/gemm_v1 tests/bench/gemm_codegen/mainloop_ab.cu -o /tmp/mainloop_ab
#include "cuco_gemm.cuh"
#include "cuco_gemm_v1.cuh"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%d %s\n", __LINE__, cudaGetErrorString(e_)); exit(2); } } while (0)
__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xFFFF) / 32768.0f) - 1.0f);
  }
}
struct Shape { long long M, N, K; int splits; };
int main() {
  Shape shapes[] = {{8192, 4096, 4096, 1}, {8192, 4096, 8192, 1}, {4096, 4096, 8192, 1}, {1024, 1024, 4096, 1},
                    {1024, 1024, 4096, 4}, {1024, 1024, 4096, 3}, {1152, 640, 4128, 1}, {1152, 640, 4128, 3},
                    {3072, 256, 4096, 1}, {3072, 256, 4096, 2}, {128, 128, 32, 1}, {128, 128, 64, 2}, {256, 128, 96, 1},
                    {4096, 1024, 2048, 1}, {2048, 1024, 1024, 1}, {1024, 512, 1024, 1}, {384, 256, 1056, 1}};
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  void* fl; const size_t FB = 256ull << 20; CK(cudaMalloc(&fl, FB));
  unsigned epochs[2] = {0, 0};
  int bad_total = 0;
  for (auto& s : shapes) {
    __nv_bfloat16 *A, *B, *C; float* ws; unsigned* sem;
    CK(cudaMalloc(&A, s.M * s.K * 2)); CK(cudaMalloc(&B, s.N * s.K * 2)); CK(cudaMalloc(&C, s.M * s.N * 2));
    const long long tiles = (s.M / 128) * (s.N / 128);
    CK(cudaMalloc(&ws, cuco_gemm::splitk_ws_bytes(tiles, s.splits))); CK(cudaMalloc(&sem, tiles * 4)); CK(cudaMemset(sem, 0, tiles * 4));
    unsigned* sem1; CK(cudaMalloc(&sem1, tiles * 4)); CK(cudaMemset(sem1, 0, tiles * 4));
    fill<<<1024, 256, 0, st>>>(A, s.M * s.K, 7); fill<<<1024, 256, 0, st>>>(B, s.N * s.K, 9);
    auto run = [&](int v) {
      const int mt = (int)(s.M / 128);
      if (s.splits == 1) {
        if (v == 1) CK(cuco_gemm_v1::launch(A, B, (int)s.N, (int)s.K, s.K, s.K, 0, mt, cuco_gemm_v1::StoreEpi{C, s.N}, st));
        else CK(cuco_gemm::launch(A, B, (int)s.N, (int)s.K, s.K, s.K, 0, mt, cuco_gemm::StoreEpi{C, s.N}, st));
      } else {
        const unsigned epoch = ++epochs[v];
        if (v == 1) CK(cuco_gemm_v1::launch_splitk(A, B, (int)s.N, (int)s.K, s.K, s.K, 0, mt, s.splits, ws, sem1, epoch, cuco_gemm_v1::StoreEpi{C, s.N}, st));
        else CK(cuco_gemm::launch_splitk(A, B, (int)s.N, (int)s.K, s.K, s.K, 0, mt, s.splits, ws, sem, epoch, cuco_gemm::StoreEpi{C, s.N}, st));
      }
    };
    // outputs of the first (1) and current (0) version at the first and the last iteration
    const size_t n = s.M * s.N;
    std::vector<unsigned short> out[2][2] = {{std::vector<unsigned short>(n), std::vector<unsigned short>(n)},
                                             {std::vector<unsigned short>(n), std::vector<unsigned short>(n)}};
    std::vector<double> t[2];
    for (int it = 0; it < 46; it++)
      for (int v = 1; v >= 0; v--) {
        CK(cudaMemsetAsync(fl, it, FB, st)); CK(cudaMemsetAsync(C, 0xFF, n * 2, st));
        CK(cudaEventRecord(e0, st)); run(v); CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (it >= 5) t[v].push_back(ms);
        if (it == 0 || it == 45) CK(cudaMemcpy(out[v][it ? 1 : 0].data(), C, n * 2, cudaMemcpyDeviceToHost));
      }
    auto differ = [&](const std::vector<unsigned short>& a, const std::vector<unsigned short>& b) {
      long long d = 0; for (size_t i = 0; i < n; i++) d += a[i] != b[i]; return d; };
    const long long self = differ(out[1][0], out[1][1]), d0 = differ(out[1][0], out[0][0]), d1 = differ(out[1][1], out[0][1]);
    const char* verdict = self ? "nondeterministic in the first version too" : (d0 || d1 ? "MISMATCH" : "bit-identical");
    if (!self && (d0 || d1)) bad_total++;
    for (auto& x : t) std::sort(x.begin(), x.end());
    double m1 = t[1][t[1].size() / 2], m0 = t[0][t[0].size() / 2];
    printf("%6lldx%5lldx%5lld split %d: first %.4f ms  current %.4f ms  (%.3fx)  %s (%lld / %lld differ)\n", s.M, s.N, s.K,
           s.splits, m1, m0, m0 / m1, verdict, d0, d1);
    cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(ws); cudaFree(sem); cudaFree(sem1);
  }
  printf(bad_total ? "MISMATCHES\n" : "no mismatch where the first version is deterministic\n");
  return bad_total ? 1 : 0;
}
