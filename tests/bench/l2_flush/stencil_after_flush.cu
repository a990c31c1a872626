// One rank's Jacobi iteration (of two: n/2 rows plus two halo rows, a 5-point stencil and its L2 norm), timed
// three ways on one GPU, to measure what the CUDA harness's L2 flush costs a memory-bound iteration:
//   warm         the iteration right after the previous one (buffers swapped), as a program's own loop runs;
//   memset_flush after a 256 MiB cudaMemsetAsync, as the harness flushes today: L2 is left full of dirty lines
//                that the iteration's misses must write back first;
//   read_flush   after a kernel that reads 256 MiB: L2 is left full of clean lines, none of the iteration's.
// The difference memset_flush - read_flush is the write-back the harness's flush adds to every timed call;
// read_flush - warm is what a cold L2 costs (the data the previous iteration left in L2).
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 tests/bench/l2_flush/stencil_after_flush.cu -o stencil_after_flush
// Run:   ./stencil_after_flush [--iters N] [n ...]     (default 41 iterations, n = 4096 8192 16384)
// Prints one JSON object: per n and way, the median and minimum of the iteration's time in microseconds.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

constexpr size_t kFlushBytes = 256ull << 20;
constexpr int kBlockX = 32, kBlockY = 32;

__global__ void stencil_step(const float* __restrict__ a, float* __restrict__ a_new, float* __restrict__ norm,
                             int row_start, int row_end, int nx) {
  int row = blockIdx.y * blockDim.y + threadIdx.y + row_start;
  int col = blockIdx.x * blockDim.x + threadIdx.x + 1;
  float residue_sq = 0.f;
  if (row < row_end && col < nx - 1) {
    size_t at = size_t(row) * nx + col;
    float next = 0.25f * (a[at + 1] + a[at - 1] + a[at + nx] + a[at - nx]);
    a_new[at] = next;
    float residue = next - a[at];
    residue_sq = residue * residue;
  }
  // one atomic per block: one per warp would serialise on the single norm word and time the atomics
  __shared__ float warp_sums[kBlockX * kBlockY / 32];
  for (int off = 16; off > 0; off /= 2) residue_sq += __shfl_down_sync(0xffffffffu, residue_sq, off);
  int lane = threadIdx.x & 31, warp = (threadIdx.y * blockDim.x + threadIdx.x) / 32;
  if (lane == 0) warp_sums[warp] = residue_sq;
  __syncthreads();
  if (warp == 0) {
    residue_sq = lane < kBlockX * kBlockY / 32 ? warp_sums[lane] : 0.f;
    for (int off = 16; off > 0; off /= 2) residue_sq += __shfl_down_sync(0xffffffffu, residue_sq, off);
    if (lane == 0) atomicAdd(norm, residue_sq);
  }
}

__global__ void read_all(const float4* __restrict__ data, size_t count, float* sink) {
  float acc = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    float4 v = data[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == -1.2345f) *sink = acc;  // never true for the zeros read; keeps the loads
}

enum Way { kWarm, kMemsetFlush, kReadFlush, kWays };
static const char* kWayNames[kWays] = {"warm", "memset_flush", "read_flush"};

struct Rank {
  int nx = 0, rows = 0;
  float* a = nullptr;
  float* a_new = nullptr;
  float* norm = nullptr;
  float* norm_host = nullptr;
};

static void iteration(Rank& r, cudaStream_t s) {
  CK(cudaMemsetAsync(r.norm, 0, sizeof(float), s));
  dim3 block(kBlockX, kBlockY);
  dim3 grid((r.nx - 2 + kBlockX - 1) / kBlockX, (r.rows - 2 + kBlockY - 1) / kBlockY);
  stencil_step<<<grid, block, 0, s>>>(r.a, r.a_new, r.norm, 1, r.rows - 1, r.nx);
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(r.norm_host, r.norm, sizeof(float), cudaMemcpyDeviceToHost, s));
  std::swap(r.a, r.a_new);
}

int main(int argc, char** argv) {
  int iters = 41;
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      sizes.push_back(std::atoi(argv[i]));
    }
  }
  if (sizes.empty()) sizes = {4096, 8192, 16384};
  if (iters < 3) iters = 3;

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  void* flush = nullptr;
  float* sink = nullptr;
  CK(cudaMalloc(&flush, kFlushBytes));
  CK(cudaMalloc(&sink, sizeof(float)));
  CK(cudaMemset(flush, 0, kFlushBytes));

  std::printf("{\"device\": \"%s\", \"l2_bytes\": %d, \"iters\": %d, \"sizes\": [", prop.name, prop.l2CacheSize, iters);
  for (size_t si = 0; si < sizes.size(); ++si) {
    Rank r;
    r.nx = sizes[si];
    r.rows = sizes[si] / 2 + 2;
    size_t bytes = size_t(r.nx) * r.rows * sizeof(float);
    CK(cudaMalloc(&r.a, bytes));
    CK(cudaMalloc(&r.a_new, bytes));
    CK(cudaMalloc(&r.norm, sizeof(float)));
    CK(cudaMallocHost(&r.norm_host, sizeof(float)));
    CK(cudaMemset(r.a, 0, bytes));
    CK(cudaMemset(r.a_new, 0, bytes));
    for (int w = 0; w < 5; ++w) iteration(r, s);  // warm-up
    CK(cudaStreamSynchronize(s));

    std::vector<float> times[kWays];
    for (int i = 0; i < iters; ++i) {
      for (int way = 0; way < kWays; ++way) {  // interleaved, so a drift of clocks hits every way alike
        if (way == kWarm) {
          iteration(r, s);  // the previous iteration, untimed: the timed one finds its output in L2
        } else if (way == kMemsetFlush) {
          CK(cudaMemsetAsync(flush, 0, kFlushBytes, s));
          CK(cudaCtxResetPersistingL2Cache());
        } else {
          read_all<<<prop.multiProcessorCount * 4, 512, 0, s>>>(static_cast<const float4*>(flush),
                                                               kFlushBytes / sizeof(float4), sink);
          CK(cudaGetLastError());
        }
        CK(cudaStreamSynchronize(s));  // the program's loop synchronises after each iteration too
        CK(cudaEventRecord(start, s));
        iteration(r, s);
        CK(cudaEventRecord(stop, s));
        CK(cudaEventSynchronize(stop));
        float ms = 0.f;
        CK(cudaEventElapsedTime(&ms, start, stop));
        times[way].push_back(ms * 1000.f);
      }
    }
    std::printf("%s{\"n\": %d, \"rank_bytes_per_buffer\": %zu", si ? ", " : "", r.nx, bytes);
    for (int way = 0; way < kWays; ++way) {
      std::vector<float>& t = times[way];
      std::sort(t.begin(), t.end());
      std::printf(", \"%s\": {\"median_us\": %.2f, \"min_us\": %.2f}", kWayNames[way], t[t.size() / 2], t[0]);
    }
    std::printf("}");
    CK(cudaFree(r.a));
    CK(cudaFree(r.a_new));
    CK(cudaFree(r.norm));
    CK(cudaFreeHost(r.norm_host));
  }
  std::printf("]}\n");
  return 0;
}
