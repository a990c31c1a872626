// What the GEMM benches of this folder share: the CUDA error check, the seeded bf16 inputs, the shapes and the
// command line (--iters N, --warmup N, --shapes M:N:K,...). Included after cuco_gemm.cuh (for shape_ok).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define BENCH_CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(2); } } while (0)

// The stream memory operations of the ABI (cuco_abi.h), which the harness defines: a bench links a shipped
// variant without the harness, so it defines them the same way (the driver's, looked up by name once).
extern "C" CUresult cuco_stream_wait_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  static PFN_cuStreamWaitValue32_v11070 fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (!fn && cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void**)&fn, 12000, cudaEnableDefault, &q) != cudaSuccess) fn = nullptr;
  return fn ? fn(stream, addr, value, flags) : CUDA_ERROR_NOT_SUPPORTED;
}
extern "C" CUresult cuco_stream_write_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  static PFN_cuStreamWriteValue32_v11070 fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (!fn && cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void**)&fn, 12000, cudaEnableDefault, &q) != cudaSuccess) fn = nullptr;
  return fn ? fn(stream, addr, value, flags) : CUDA_ERROR_NOT_SUPPORTED;
}

namespace bench {

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xFFFF) / 32768.0f) - 1.0f);
  }
}

struct Shape { long long M, N, K; };

// The command line into iters, warmup and shapes (defaults kept where not given); false after printing why.
inline bool parse_args(int argc, char** argv, int& iters, int& warmup, std::vector<Shape>& shapes) {
  std::string shapes_arg = "8192:4096:4096,8192:4096:8192,4096:4096:8192";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--iters") iters = atoi(argv[i + 1]);
    else if (a == "--warmup") warmup = atoi(argv[i + 1]);
    else if (a == "--shapes") shapes_arg = argv[i + 1];
    else { fprintf(stderr, "unknown argument %s (--iters N, --warmup N, --shapes M:N:K,...)\n", a.c_str()); return false; }
  }
  for (size_t pos = 0; pos < shapes_arg.size();) {
    size_t end = shapes_arg.find(',', pos);
    if (end == std::string::npos) end = shapes_arg.size();
    Shape s{};
    if (sscanf(shapes_arg.substr(pos, end - pos).c_str(), "%lld:%lld:%lld", &s.M, &s.N, &s.K) != 3 || !cuco_gemm::shape_ok(s.M, s.N, s.K)) {
      fprintf(stderr, "--shapes: '%s' is not M:N:K with M, N multiples of 128 and K of 32\n", shapes_arg.substr(pos, end - pos).c_str());
      return false;
    }
    shapes.push_back(s);
    pos = end + 1;
  }
  return true;
}

}  // namespace bench
