// One-GPU benchmark of gemm_allgather's split_tail GEMM (workloads/gemm_allgather/variants/split_tail.cu)
// alone (no peers, no copies) against the baseline's, on the per-rank shapes of the large configs. What
// split_tail's overlap rests on: with the last partial wave's tiles split, the GEMM ends no later than the
// baseline's (the data it finishes last is then what crosses NVLink after it). The efficiency itself
// needs two GPUs; whether the split tail costs GEMM time shows here, on one.
//
// Kernels (A: M x K, B: N x K, C = A * B^T, bf16, fp32 accumulate):
//   plain    cuco_gemm::gemm_kernel<StoreEpi>: the baseline's GEMM, the reference
//   whole    split_tail's nt_gemm_kernel, tail_split 0 (every tile whole, items in launch order)
//   k2 k3 k4 tail_split 2, 3, 4: the last partial wave's tiles in k parts (fp32 partials, summed in order)
//   halves   tail_split -2: the last partial wave's tiles as two 128 x 64 halves
// The epilogue runs as in a job with no peers (P.n = 0, no copy streams): chunk counts, the tile counter and
// the last epilogue's fences all execute. The item layout is split_tail's setup's (the GPU's CTA slots).
//
// Checks: whole and halves must be bit-exact against plain (the same mma.sync sequence per element); the
// k-split kernels must be within problem.cu's bf16 tolerance of plain (|got - ref| <= 1.6e-2 (|ref| +
// 0.1 sqrt(K) / 3)) and bit-exact outside the tail. Timing: every iteration flushes L2 (a 256 MiB memset),
// the kernels interleaved, CUDA events, medians. Prints one JSON object on stdout.
//   bench_split_tail [--iters N] [--warmup N] [--shapes M:N:K,...]
#include "split_tail.cu"  // the shipped variant itself (workloads/gemm_allgather/variants), for its kernel

#include "bench_common.cuh"
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace {

using bench::fill_bf16;
using bench::Shape;

const char* const kNames[] = {"plain", "whole", "k2", "k3", "k4", "halves"};
const int kSplitOf[] = {0, 0, 2, 3, 4, -2};
constexpr int kKernels = 6;

// split_tail's large-path layout for one tail_split value (its impl_setup, without NCCL).
struct Layout { int k_ways, full_items, items, counted, lsa_mtile0, mt_per_chunk, tail; };

Layout layout(const Shape& s, int tail_split, int slots) {
  const int mtiles = (int)(s.M / cuco_gemm::BM), ntiles = (int)(s.N / cuco_gemm::BN), total = mtiles * ntiles;
  Layout L{};
  int tail = total % slots;
  if (tail == 0) tail = slots;
  if (tail * 4 < slots && tail + slots <= total) tail += slots;
  if (tail > total) tail = total;
  const bool halves = tail_split == -2;
  L.k_ways = tail_split >= 2 ? std::min(tail_split, 4) : 0;
  const int ways = L.k_ways ? L.k_ways : (halves ? 2 : 1);
  L.tail = tail;
  L.full_items = ways > 1 ? total - tail : total;
  L.items = ways > 1 ? L.full_items + tail * ways : total;
  L.counted = halves ? L.items : total;
  const int tail_items = L.items - L.full_items;
  int last = ways > 1 ? tail_items % slots : tail;
  if (last == 0) last = std::min(slots, tail_items);
  const int first_lsa_item = std::max(0, L.items - last - (last * 4 < slots ? slots : 0));
  const int first_lsa_tile = first_lsa_item < L.full_items ? first_lsa_item : L.full_items + (first_lsa_item - L.full_items) / ways;
  L.lsa_mtile0 = first_lsa_tile / ntiles;
  const int chunks = std::min(std::max(kChunks, 1), std::min(64, mtiles));
  L.mt_per_chunk = (mtiles + chunks - 1) / chunks;
  return L;
}

struct Buffers {
  __nv_bfloat16 *A, *B, *C;
  unsigned* counters;  // [0, 64) chunk counts, 64 tiles done, 72.. copies done, 80.. flags, 128.. k-split semaphores
  size_t counter_bytes;
  unsigned* tflag;     // raised by an expired bounded wait
  float4* ws;
};

// Every launch starts from zeroed counters (epoch 1), outside the timed span.
void reset(Buffers& b, cudaStream_t st) { BENCH_CK(cudaMemsetAsync(b.counters, 0, b.counter_bytes, st)); }

void launch(int which, const Shape& s, Buffers& b, int slots, cudaStream_t st) {
  if (which == 0) {
    dim3 grid((unsigned)(s.N / cuco_gemm::BN), (unsigned)(s.M / cuco_gemm::BM));
    cuco_gemm::gemm_kernel<cuco_gemm::StoreEpi><<<grid, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, st>>>(
        b.A, b.B, (int)s.K, s.K, s.K, 0, cuco_gemm::StoreEpi{b.C, s.N});
  } else {
    const Layout L = layout(s, kSplitOf[which], slots);
    NtEpi e{};
    e.local = b.C; e.ldc = s.N; e.chunk_count = b.counters; e.mtiles_per_chunk = L.mt_per_chunk;
    e.lsa_mtile0 = L.lsa_mtile0; e.P.n = 0; e.my_flags = b.counters + 80;
    e.tiles_done = b.counters + 64; e.copies_done = b.counters + 72; e.copy_streams = 0;
    e.epoch = 1; e.total_items = (unsigned)L.counted;
    e.tmo = 2000000000ull; e.tflag = b.tflag;
    nt_gemm_kernel<NtEpi><<<(unsigned)L.items, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES, st>>>(
        b.A, b.B, (int)s.K, s.K, s.K, (int)(s.N / cuco_gemm::BN), L.full_items, L.k_ways, b.ws, b.counters + 128, e);
  }
  BENCH_CK(cudaGetLastError());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

float bf16_to_float(unsigned short u) {
  unsigned w = (unsigned)u << 16;
  float f;
  memcpy(&f, &w, 4);
  return f;
}

// Runs every kernel once against plain's C: elements that differ in bits, those outside the bf16
// tolerance (NaN included), and those that differ in rows before the tail (full tiles must be exact).
void check(const Shape& s, Buffers& b, int slots, cudaStream_t st, long long (&diff)[kKernels],
           long long (&out_of_tol)[kKernels], long long (&diff_before_tail)[kKernels]) {
  const size_t n = (size_t)s.M * s.N;
  const double scale = 0.1 * sqrt((double)s.K) / 3.0, tol = 1.6e-2;
  std::vector<unsigned short> ref(n), got(n);
  for (int k = 0; k < kKernels; k++) {
    BENCH_CK(cudaMemsetAsync(b.C, 0xFF, n * 2, st));
    reset(b, st);
    launch(k, s, b, slots, st);
    BENCH_CK(cudaStreamSynchronize(st));
    BENCH_CK(cudaMemcpy(k == 0 ? ref.data() : got.data(), b.C, n * 2, cudaMemcpyDeviceToHost));
    diff[k] = out_of_tol[k] = diff_before_tail[k] = 0;
    if (k == 0) continue;
    const Layout L = layout(s, kSplitOf[k], slots);
    const long long ntiles = s.N / cuco_gemm::BN;
    for (size_t i = 0; i < n; i++) {
      if (ref[i] == got[i]) continue;
      diff[k]++;
      const long long row = (long long)(i / s.N), col = (long long)(i % s.N);
      const long long tile = (row / cuco_gemm::BM) * ntiles + col / cuco_gemm::BN;
      if (tile < L.full_items) diff_before_tail[k]++;
      const double r = bf16_to_float(ref[i]), g = bf16_to_float(got[i]);
      if (!(fabs(g - r) <= tol * (fabs(r) + scale))) out_of_tol[k]++;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 41, warmup = 5;
  std::vector<Shape> shapes;
  if (!bench::parse_args(argc, argv, iters, warmup, shapes)) return 2;
  cudaDeviceProp prop;
  BENCH_CK(cudaGetDeviceProperties(&prop, 0));
  BENCH_CK(cudaFuncSetAttribute(cuco_gemm::gemm_kernel<cuco_gemm::StoreEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  BENCH_CK(cudaFuncSetAttribute(nt_gemm_kernel<NtEpi>, cudaFuncAttributeMaxDynamicSharedMemorySize, cuco_gemm::SMEM_BYTES));
  int per_sm = 0;
  BENCH_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, nt_gemm_kernel<NtEpi>, cuco_gemm::THREADS, cuco_gemm::SMEM_BYTES));
  const int slots = std::max(per_sm, 1) * prop.multiProcessorCount;
  cudaStream_t st;
  BENCH_CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  BENCH_CK(cudaEventCreate(&e0));
  BENCH_CK(cudaEventCreate(&e1));
  const size_t flush_bytes = 256ull << 20;
  void* flush;
  BENCH_CK(cudaMalloc(&flush, flush_bytes));

  printf("{\"device\": \"%s\", \"sm_count\": %d, \"slots\": %d, \"iters\": %d, \"shapes\": [", prop.name,
         prop.multiProcessorCount, slots, iters);
  for (size_t si = 0; si < shapes.size(); si++) {
    const Shape& s = shapes[si];
    const long long tiles = (s.M / cuco_gemm::BM) * (s.N / cuco_gemm::BN);
    Buffers b{};
    BENCH_CK(cudaMalloc(&b.A, (size_t)s.M * s.K * 2));
    BENCH_CK(cudaMalloc(&b.B, (size_t)s.N * s.K * 2));
    BENCH_CK(cudaMalloc(&b.C, (size_t)s.M * s.N * 2));
    b.counter_bytes = (128 + tiles) * sizeof(unsigned);
    BENCH_CK(cudaMalloc(&b.counters, b.counter_bytes));
    BENCH_CK(cudaMalloc(&b.tflag, sizeof(unsigned)));
    BENCH_CK(cudaMemset(b.tflag, 0, sizeof(unsigned)));
    BENCH_CK(cudaMalloc(&b.ws, cuco_gemm::splitk_ws_bytes(layout(s, 4, slots).tail, 4)));
    fill_bf16<<<1024, 256, 0, st>>>(b.A, (size_t)s.M * s.K, 1u);
    fill_bf16<<<1024, 256, 0, st>>>(b.B, (size_t)s.N * s.K, 2u);
    BENCH_CK(cudaStreamSynchronize(st));

    long long diff[kKernels], out_of_tol[kKernels], diff_before_tail[kKernels];
    check(s, b, slots, st, diff, out_of_tol, diff_before_tail);
    std::vector<double> ms[kKernels];
    for (int it = 0; it < warmup + iters; it++)
      for (int k = 0; k < kKernels; k++) {
        BENCH_CK(cudaMemsetAsync(flush, it & 0xFF, flush_bytes, st));
        reset(b, st);
        BENCH_CK(cudaEventRecord(e0, st));
        launch(k, s, b, slots, st);
        BENCH_CK(cudaEventRecord(e1, st));
        BENCH_CK(cudaEventSynchronize(e1));
        float t;
        BENCH_CK(cudaEventElapsedTime(&t, e0, e1));
        if (it >= warmup) ms[k].push_back(t);
      }
    unsigned tflag = 0;
    BENCH_CK(cudaMemcpy(&tflag, b.tflag, sizeof tflag, cudaMemcpyDeviceToHost));

    const double flop = 2.0 * s.M * s.N * s.K, base = median(ms[0]);
    printf("%s{\"M\": %lld, \"N\": %lld, \"K\": %lld, \"tail\": %d, \"timeout_flag\": %u, \"kernels\": {", si ? ", " : "",
           s.M, s.N, s.K, layout(s, 2, slots).tail, tflag);
    for (int k = 0; k < kKernels; k++) {
      std::vector<double> v = ms[k];
      std::sort(v.begin(), v.end());
      const double med = median(v), q1 = v[v.size() / 4], q3 = v[(3 * v.size()) / 4];
      printf("%s\"%s\": {\"tail_split\": %d, \"median_ms\": %.5f, \"q1_ms\": %.5f, \"q3_ms\": %.5f, \"tflops\": %.1f, "
             "\"vs_plain\": %.4f, \"mismatches\": %lld, \"out_of_tolerance\": %lld, \"mismatches_before_tail\": %lld}",
             k ? ", " : "", kNames[k], kSplitOf[k], med, q1, q3, flop / (med * 1e-3) / 1e12, med / base, diff[k],
             out_of_tol[k], diff_before_tail[k]);
    }
    printf("}}");
    fflush(stdout);
    cudaFree(b.A); cudaFree(b.B); cudaFree(b.C); cudaFree(b.counters); cudaFree(b.tflag); cudaFree(b.ws);
  }
  printf("]}\n");
  cudaFree(flush);
  return 0;
}
