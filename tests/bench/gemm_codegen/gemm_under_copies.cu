// Two-GPU benchmark: how much the all-gather's copy traffic slows the GEMM it overlaps with. Both GPUs run
// a GEMM on a per-rank shape of gemm_allgather, either the baseline's (`plain`: cuco_gemm::gemm_kernel
// <StoreEpi>) or split_tail's (`split_tail`: the shipped variant's nt_gemm_kernel<NtEpi> at tail_split 2,
// with its per-tile fence and chunk counts, no peers), while each GPU's copy engine moves C's size (16
// chunks) in one of these patterns:
//   alone          no copies: the GEMM as the overlap bound assumes it
//   peer_paced     each GPU copies into the other, a chunk every 1/17 of the GEMM (what the copy-engine
//                  variants do: chunks as rows finish)
//   peer_burst     the same copies issued at once (back to back from the GEMM's start)
//   local_paced    paced device-to-device copies inside each GPU (HBM and L2 traffic, no NVLink)
//   peer_out_only  only GPU 0 copies (GPU 1 receives), peer_in_only: only GPU 1
// The copies read a separate buffer, so they never wait for the GEMM. Each call starts after an L2 flush
// (a 256 MiB memset, as the harness's), the modes interleaved; the GEMM's time is the larger of the two
// GPUs' (CUDA events on the GEMM's stream); medians and quartiles. Needs 2 GPUs with peer access.
//
//   nvcc -std=c++17 -arch=sm_90 -O3 -Iworkloads/_harness/cuda -Iworkloads/gemm_allgather/variants -I"$NCCL_HOME/include" \
//        tests/bench/gemm_codegen/gemm_under_copies.cu -o /tmp/gemm_under_copies -L"$NCCL_HOME/lib" -l:libnccl.so.2 \
//        -Xlinker -rpath,"$NCCL_HOME/lib"      (NCCL_HOME: the NCCL wheel's nvidia/nccl folder)
//   /tmp/gemm_under_copies [--iters 21] [--warmup 3] [--shapes 8192:4096:4096,8192:4096:8192]
#include "split_tail.cu"  // the shipped variant (workloads/gemm_allgather/variants), for its GEMM kernel

#include "bench_common.cuh"
#include <algorithm>
#include <chrono>
#include <vector>
using bench::Shape;

static void spin_us(double us) { auto t0 = std::chrono::steady_clock::now(); while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < us) {} }

int main(int argc, char** argv) {
  int iters = 21, warmup = 3; std::vector<Shape> shapes;
  if (!bench::parse_args(argc, argv, iters, warmup, shapes)) return 2;
  const int G = 2;
  for (int g = 0; g < G; g++) { BENCH_CK(cudaSetDevice(g)); BENCH_CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    BENCH_CK(cudaFuncSetAttribute(cuco_gemm::gemm_kernel<cuco_gemm::StoreEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
    BENCH_CK(cudaFuncSetAttribute(nt_gemm_kernel<NtEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES)); }
  cudaDeviceProp prop; BENCH_CK(cudaGetDeviceProperties(&prop, 0));
  const int slots = 2 * prop.multiProcessorCount;   // 2 CTAs per SM, as split_tail's setup finds
  const char* kernels[] = {"plain", "split_tail"};
  const char* modes[] = {"alone", "peer_paced", "peer_burst", "local_paced", "peer_out_only", "peer_in_only"};
  const int nmodes = 6;
  for (const Shape& s : shapes) {
    __nv_bfloat16 *A[G], *B[G], *C[G], *src[G], *dst[G]; void* flush[G]; cudaStream_t st[G], cs[G]; cudaEvent_t e0[G], e1[G];
    unsigned *counters[G], *tflag[G]; float4* ws[G];
    const size_t cbytes = (size_t)s.M * s.N * 2, fb = 256ull << 20;
    const int mtiles = (int)(s.M / cuco_gemm::BM), ntiles = (int)(s.N / cuco_gemm::BN), total = mtiles * ntiles;
    const int tail = total % slots ? total % slots : slots, full = total - tail;   // split_tail's k-split tail
    const size_t counter_bytes = (128 + (size_t)total) * sizeof(unsigned);
    for (int g = 0; g < G; g++) {
      BENCH_CK(cudaSetDevice(g));
      BENCH_CK(cudaMalloc(&A[g], (size_t)s.M * s.K * 2)); BENCH_CK(cudaMalloc(&B[g], (size_t)s.N * s.K * 2));
      BENCH_CK(cudaMalloc(&C[g], cbytes)); BENCH_CK(cudaMalloc(&src[g], cbytes)); BENCH_CK(cudaMalloc(&dst[g], cbytes));
      BENCH_CK(cudaMalloc(&flush[g], fb));
      BENCH_CK(cudaMalloc(&counters[g], counter_bytes)); BENCH_CK(cudaMalloc(&tflag[g], 4)); BENCH_CK(cudaMemset(tflag[g], 0, 4));
      BENCH_CK(cudaMalloc(&ws[g], cuco_gemm::splitk_ws_bytes(tail, 2)));
      int lo, hi; BENCH_CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
      BENCH_CK(cudaStreamCreateWithPriority(&st[g], cudaStreamNonBlocking, lo));
      BENCH_CK(cudaStreamCreateWithPriority(&cs[g], cudaStreamNonBlocking, hi));
      BENCH_CK(cudaEventCreate(&e0[g])); BENCH_CK(cudaEventCreate(&e1[g]));
      bench::fill_bf16<<<1024, 256, 0, st[g]>>>(A[g], (size_t)s.M * s.K, 1u); bench::fill_bf16<<<1024, 256, 0, st[g]>>>(B[g], (size_t)s.N * s.K, 2u);
      BENCH_CK(cudaMemsetAsync(src[g], 1, cbytes, st[g]));
    }
    for (int g = 0; g < G; g++) { BENCH_CK(cudaSetDevice(g)); BENCH_CK(cudaDeviceSynchronize()); }
    std::vector<double> ms[2][nmodes];
    const double gemm_us_guess = 700.0 * s.K / 4096.0, gap = gemm_us_guess / 17.0;
    for (int it = 0; it < warmup + iters; it++)
      for (int k = 0; k < 2; k++)
      for (int m = 0; m < nmodes; m++) {
        for (int g = 0; g < G; g++) {
          BENCH_CK(cudaSetDevice(g)); BENCH_CK(cudaMemsetAsync(flush[g], it & 0xFF, fb, st[g]));
          BENCH_CK(cudaMemsetAsync(counters[g], 0, counter_bytes, st[g])); BENCH_CK(cudaStreamSynchronize(st[g]));
        }
        for (int g = 0; g < G; g++) {
          BENCH_CK(cudaSetDevice(g)); BENCH_CK(cudaEventRecord(e0[g], st[g]));
          if (k == 0) {
            dim3 grid((unsigned)ntiles, (unsigned)mtiles);
            cuco_gemm::gemm_kernel<cuco_gemm::StoreEpi><<<grid, 256, cuco_gemm::SMEM_BYTES, st[g]>>>(A[g], B[g], (int)s.K, s.K, s.K, 0, cuco_gemm::StoreEpi{C[g], s.N});
          } else {   // every row counted in 16 chunks (no LSA rows: no peers here), epoch 1 from zeroed counters
            NtEpi e{};
            e.local = C[g]; e.ldc = s.N; e.chunk_count = counters[g]; e.mtiles_per_chunk = (mtiles + 15) / 16;
            e.lsa_mtile0 = mtiles; e.P.n = 0; e.my_flags = counters[g] + 80; e.tiles_done = counters[g] + 64;
            e.copies_done = counters[g] + 72; e.copy_streams = 0; e.epoch = 1; e.total_items = (unsigned)total;
            e.tmo = 2000000000ull; e.tflag = tflag[g];
            nt_gemm_kernel<NtEpi><<<(unsigned)(full + 2 * tail), 256, cuco_gemm::SMEM_BYTES, st[g]>>>(
                A[g], B[g], (int)s.K, s.K, s.K, ntiles, full, 2, ws[g], counters[g] + 128, e);
          }
          BENCH_CK(cudaGetLastError());
          BENCH_CK(cudaEventRecord(e1[g], st[g]));
        }
        const size_t chunk = cbytes / 16;
        if (m != 0) {
          if (m != 2) spin_us(gap);
          for (int c = 0; c < 16; c++) {
            for (int g = 0; g < G; g++) {
              BENCH_CK(cudaSetDevice(g));
              char* from = (char*)src[g] + c * chunk;
              if (m == 3) BENCH_CK(cudaMemcpyAsync((char*)dst[g] + c * chunk, from, chunk, cudaMemcpyDeviceToDevice, cs[g]));
              else if (m == 4 && g == 1) continue;
              else if (m == 5 && g == 0) continue;
              else BENCH_CK(cudaMemcpyPeerAsync((char*)dst[1 - g] + c * chunk, 1 - g, from, g, chunk, cs[g]));
            }
            if (m != 2) spin_us(gap);
          }
        }
        for (int g = 0; g < G; g++) { BENCH_CK(cudaSetDevice(g)); BENCH_CK(cudaDeviceSynchronize()); }
        float t0, t1; BENCH_CK(cudaSetDevice(0)); BENCH_CK(cudaEventElapsedTime(&t0, e0[0], e1[0]));
        BENCH_CK(cudaSetDevice(1)); BENCH_CK(cudaEventElapsedTime(&t1, e0[1], e1[1]));
        if (it >= warmup) ms[k][m].push_back(std::max(t0, t1));
      }
    printf("%lldx%lldx%lld: GEMM time (max of the 2 GPUs), median of %d [q1 q3], change against the same kernel alone\n", s.M, s.N, s.K, iters);
    for (int k = 0; k < 2; k++) {
      double base = 0;
      for (int m = 0; m < nmodes; m++) {
        std::vector<double>& v = ms[k][m];
        std::sort(v.begin(), v.end()); double med = v[v.size() / 2]; if (m == 0) base = med;
        printf("  %-10s %-14s %.4f ms [%.4f %.4f]  %+.1f us\n", kernels[k], modes[m], med, v[v.size() / 4], v[3 * v.size() / 4], (med - base) * 1e3);
      }
    }
    unsigned tf[G] = {0, 0};
    for (int g = 0; g < G; g++) { BENCH_CK(cudaSetDevice(g)); BENCH_CK(cudaMemcpy(&tf[g], tflag[g], 4, cudaMemcpyDeviceToHost)); }
    if (tf[0] || tf[1]) printf("  a bounded wait expired in split_tail's epilogue\n");
    for (int g = 0; g < G; g++) { BENCH_CK(cudaSetDevice(g)); cudaFree(A[g]); cudaFree(B[g]); cudaFree(C[g]); cudaFree(src[g]); cudaFree(dst[g]); cudaFree(flush[g]);
      cudaFree(counters[g]); cudaFree(tflag[g]); cudaFree(ws[g]); }
  }
  return 0;
}
