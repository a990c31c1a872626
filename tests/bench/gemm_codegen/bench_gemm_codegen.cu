// One-GPU benchmark of the GEMM kernels that gemm_allgather's shipped code launches, alone (no peers, no
// copies), on the per-rank shapes of its large configs. It guards what the hybrid's overlap efficiency
// rests on: its GEMM, epilogue and all, as fast as the baseline's. With cuco_gemm.cuh's first mainloop it
// was not (1.021x, and 1.054x before the hybrid launched ga_gemm_kernel: the epilogue's code moved the
// loop's schedule; docs/measurements/gpu-workloads.md, "m8k_k8192: device timeline" and "The hybrid's GEMM schedule, on
// one GPU"); with the current one every form is within 0.6 %. It shows here, on one GPU, without the
// multi-GPU machine the efficiency needs.
//
// Kernels (A: M x K, B: N x K, C = A * B^T, bf16, fp32 accumulate; the same tile_mainloop in all of them):
//   plain        cuco_gemm::gemm_kernel<StoreEpi>: the baseline's GEMM, the reference
//   hybrid       ga_gemm_kernel<ChunkCountEpi>, trace null: the shipped hybrid's large-path GEMM
//   hybrid_old   cuco_gemm::gemm_kernel<ChunkCountEpi>: the hybrid's GEMM before 353b09f
//   plain_trace  ga_gemm_kernel<StoreEpi>, trace null: the timeline trick on the plain epilogue
// The epilogue runs as in a job with no peers (P.n = 0, no copy streams): chunk counts, the tile counter,
// the LSA-tail wait (on a word already past every epoch) and the last tile's fences all execute.
//
// Timing: every iteration flushes L2 (a 256 MiB memset) and then times each kernel with CUDA events, the
// kernels interleaved (A B C D A B C D ...); medians over the iterations. Every kernel's C must be
// bit-exact against plain's (the same arithmetic in the same order). Prints one JSON object on stdout.
//   bench_gemm_codegen [--iters N] [--warmup N] [--shapes M:N:K,...]
#include "hybrid.cu"  // the shipped variant itself (workloads/gemm_allgather/variants), for its kernels

#include "bench_common.cuh"
#include <algorithm>
#include <string>
#include <vector>

namespace {

using bench::fill_bf16;
using bench::Shape;

struct Buffers {
  __nv_bfloat16 *A, *B, *C;
  unsigned* counters;  // [0, 64) chunk counts, 64 tiles done, 66 "peers ready", 72.. copies done, 96 timeout flag
  unsigned epoch = 0;
};

// The shipped hybrid's epilogue as run_large fills it, for a job with no peers.
ChunkCountEpi chunk_epi(const Shape& s, Buffers& b) {
  const int mtiles = (int)(s.M / cuco_gemm::BM), ntiles = (int)(s.N / cuco_gemm::BN);
  int chunks = std::min(kChunks, mtiles);
  while (mtiles % chunks) chunks--;
  const int mt_per_chunk = mtiles / chunks, tail = std::min(std::max(kLsaTail, 0), chunks);
  ChunkCountEpi e{};
  e.local = b.C; e.ldc = s.N; e.chunk_count = b.counters; e.mtiles_per_chunk = mt_per_chunk;
  e.tail_mtile0 = (chunks - tail) * mt_per_chunk;
  e.P.n = 0;
  e.my_flags = b.counters + 80;
  e.peers_ready = b.counters + 66; e.tiles_done = b.counters + 64; e.copies_done = b.counters + 72;
  e.copy_streams = 0; e.epoch = ++b.epoch; e.total_tiles = (unsigned)(mtiles * ntiles);
  e.tmo = 2000000000ull; e.tflag = b.counters + 96;
  return e;
}

cuco_gemm::StoreEpi store_epi(const Shape& s, Buffers& b) { return cuco_gemm::StoreEpi{b.C, s.N}; }

template <class Epi> void launch_plain(const Shape& s, Buffers& b, Epi e, cudaStream_t st) {
  dim3 grid((unsigned)(s.N / cuco_gemm::BN), (unsigned)(s.M / cuco_gemm::BM));
  cuco_gemm::gemm_kernel<Epi><<<grid, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, st>>>(b.A, b.B, (int)s.K, s.K, s.K, 0, e);
}
template <class Epi> void launch_ga(const Shape& s, Buffers& b, Epi e, cudaStream_t st) {
  dim3 grid((unsigned)(s.N / cuco_gemm::BN), (unsigned)(s.M / cuco_gemm::BM));
  ga_gemm_kernel<Epi><<<grid, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, st>>>(b.A, b.B, (int)s.K, s.K, s.K, 0, e, nullptr);
}

const char* const kNames[] = {"plain", "hybrid", "hybrid_old", "plain_trace"};
constexpr int kKernels = 4;

void launch(int which, const Shape& s, Buffers& b, cudaStream_t st) {
  switch (which) {
    case 0: launch_plain(s, b, store_epi(s, b), st); break;
    case 1: launch_ga(s, b, chunk_epi(s, b), st); break;
    case 2: launch_plain(s, b, chunk_epi(s, b), st); break;
    default: launch_ga(s, b, store_epi(s, b), st); break;
  }
  BENCH_CK(cudaGetLastError());
}

void set_smem() {
  const int bytes = cuco_gemm::SMEM_BYTES;
  BENCH_CK(cudaFuncSetAttribute(cuco_gemm::gemm_kernel<cuco_gemm::StoreEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  BENCH_CK(cudaFuncSetAttribute(cuco_gemm::gemm_kernel<ChunkCountEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  BENCH_CK(cudaFuncSetAttribute(ga_gemm_kernel<ChunkCountEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  BENCH_CK(cudaFuncSetAttribute(ga_gemm_kernel<cuco_gemm::StoreEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs every kernel once, copies its C back and counts the elements that differ from plain's bit pattern.
void check_bit_exact(const Shape& s, Buffers& b, cudaStream_t st, long long (&mismatches)[kKernels]) {
  const size_t n = (size_t)s.M * s.N;
  std::vector<unsigned short> ref(n), got(n);
  for (int k = 0; k < kKernels; k++) {
    BENCH_CK(cudaMemsetAsync(b.C, 0xFF, n * 2, st));
    launch(k, s, b, st);
    BENCH_CK(cudaStreamSynchronize(st));
    BENCH_CK(cudaMemcpy(k == 0 ? ref.data() : got.data(), b.C, n * 2, cudaMemcpyDeviceToHost));
    mismatches[k] = 0;
    if (k > 0)
      for (size_t i = 0; i < n; i++) mismatches[k] += ref[i] != got[i];
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 41, warmup = 5;
  std::vector<Shape> shapes;
  if (!bench::parse_args(argc, argv, iters, warmup, shapes)) return 2;
  cudaDeviceProp prop;
  BENCH_CK(cudaGetDeviceProperties(&prop, 0));
  set_smem();
  cudaStream_t st;
  BENCH_CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  BENCH_CK(cudaEventCreate(&e0));
  BENCH_CK(cudaEventCreate(&e1));
  const size_t flush_bytes = 256ull << 20;
  void* flush;
  BENCH_CK(cudaMalloc(&flush, flush_bytes));

  printf("{\"device\": \"%s\", \"sm_count\": %d, \"iters\": %d, \"shapes\": [", prop.name, prop.multiProcessorCount, iters);
  for (size_t si = 0; si < shapes.size(); si++) {
    const Shape& s = shapes[si];
    Buffers b{};
    BENCH_CK(cudaMalloc(&b.A, (size_t)s.M * s.K * 2));
    BENCH_CK(cudaMalloc(&b.B, (size_t)s.N * s.K * 2));
    BENCH_CK(cudaMalloc(&b.C, (size_t)s.M * s.N * 2));
    BENCH_CK(cudaMalloc(&b.counters, 128 * sizeof(unsigned)));
    BENCH_CK(cudaMemset(b.counters, 0, 128 * sizeof(unsigned)));
    const unsigned ready = 0x40000000u;  // "peers ready": past every epoch (cuco_wait_geq compares by difference)
    BENCH_CK(cudaMemcpy(b.counters + 66, &ready, sizeof ready, cudaMemcpyHostToDevice));
    fill_bf16<<<1024, 256, 0, st>>>(b.A, (size_t)s.M * s.K, 1u);
    fill_bf16<<<1024, 256, 0, st>>>(b.B, (size_t)s.N * s.K, 2u);
    BENCH_CK(cudaStreamSynchronize(st));

    long long mismatches[kKernels];
    check_bit_exact(s, b, st, mismatches);
    std::vector<double> ms[kKernels];
    for (int it = 0; it < warmup + iters; it++)
      for (int k = 0; k < kKernels; k++) {
        BENCH_CK(cudaMemsetAsync(flush, it & 0xFF, flush_bytes, st));
        BENCH_CK(cudaEventRecord(e0, st));
        launch(k, s, b, st);
        BENCH_CK(cudaEventRecord(e1, st));
        BENCH_CK(cudaEventSynchronize(e1));
        float t;
        BENCH_CK(cudaEventElapsedTime(&t, e0, e1));
        if (it >= warmup) ms[k].push_back(t);
      }
    unsigned tflag = 0;
    BENCH_CK(cudaMemcpy(&tflag, b.counters + 96, sizeof tflag, cudaMemcpyDeviceToHost));

    const double flop = 2.0 * s.M * s.N * s.K, base = median(ms[0]);
    printf("%s{\"M\": %lld, \"N\": %lld, \"K\": %lld, \"timeout_flag\": %u, \"kernels\": {", si ? ", " : "", s.M, s.N, s.K, tflag);
    for (int k = 0; k < kKernels; k++) {
      std::vector<double> v = ms[k];
      std::sort(v.begin(), v.end());
      const double med = median(v), q1 = v[v.size() / 4], q3 = v[(3 * v.size()) / 4];
      printf("%s\"%s\": {\"median_ms\": %.5f, \"q1_ms\": %.5f, \"q3_ms\": %.5f, \"tflops\": %.1f, \"vs_plain\": %.4f, "
             "\"mismatches\": %lld}",
             k ? ", " : "", kNames[k], med, q1, q3, flop / (med * 1e-3) / 1e12, med / base, mismatches[k]);
    }
    printf("}}");
    fflush(stdout);
    cudaFree(b.A); cudaFree(b.B); cudaFree(b.C); cudaFree(b.counters);
  }
  printf("]}\n");
  cudaFree(flush);
  return 0;
}
