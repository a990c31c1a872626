// cuco_check.cuh -- verification helpers for a workload's problem.cu (frozen): a bf16 output against an
// fp32 reference computed by the verifier, with the bf16 tolerance of the spec. Internal linkage.
//   |got - ref| <= tol * (|ref| + scale_i), NaN / Inf fail
// scale_i keeps elements near zero (where a relative bound means nothing) from failing on rounding alone.
// By default it is 0.1 * rms(ref); a verifier whose outputs are sums that cancel passes its own per-element
// scale: the magnitude of the summed terms (e.g. sqrt(sum_j (p_j v_j)^2) / sum_j p_j for attention, where a
// bf16 P alone moves O by about 2^-9 of that), so that the bound is the error of a plain bf16
// implementation times tol / 2^-9, and still far below any real error (a dropped contribution, a missing
// rescale).
#ifndef CUCO_CHECK_CUH
#define CUCO_CHECK_CUH
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cmath>

namespace {
namespace cuco_check {

__global__ void sum_squares(const float* __restrict__ ref, size_t n, double* __restrict__ acc) {
  double a = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a += (double)ref[i] * ref[i];
  for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(acc, a);
}

__global__ void first_bad(const __nv_bfloat16* __restrict__ got, const float* __restrict__ ref, size_t n, float tol,
                          float scale, const float* __restrict__ elem_scale, unsigned long long* __restrict__ first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = __bfloat162float(got[i]), r = ref[i];
    if (!(fabsf(g - r) <= tol * (fabsf(r) + (elem_scale ? elem_scale[i] : scale)))) atomicMin(first, (unsigned long long)i);
  }
}

// First bad index of got (bf16, n) against ref (fp32, n), or -1; -2 on a CUDA error. Synchronises s.
// elem_scale: the per-element scale (n floats), or nullptr for 0.1 * rms(ref).
inline long long bf16_vs_f32(const void* got, const float* ref, size_t n, double tol, cudaStream_t s,
                             double* expected, double* gotv, const float* elem_scale = nullptr) {
  double* d_sq = nullptr; unsigned long long* d_first = nullptr;
  if (cudaMalloc(&d_sq, sizeof(double)) != cudaSuccess || cudaMalloc(&d_first, 8) != cudaSuccess) return -2;
  double sq = 0; unsigned long long first = ~0ull;
  cudaMemcpyAsync(d_sq, &sq, sizeof sq, cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(d_first, &first, 8, cudaMemcpyHostToDevice, s);
  sum_squares<<<1024, 256, 0, s>>>(ref, n, d_sq);
  cudaMemcpyAsync(&sq, d_sq, sizeof sq, cudaMemcpyDeviceToHost, s);
  if (cudaStreamSynchronize(s) != cudaSuccess) return -2;
  float scale = (float)(0.1 * sqrt(sq / (double)(n ? n : 1))) + 1e-12f;
  first_bad<<<1024, 256, 0, s>>>((const __nv_bfloat16*)got, ref, n, (float)tol, scale, elem_scale, d_first);
  cudaMemcpyAsync(&first, d_first, 8, cudaMemcpyDeviceToHost, s);
  if (cudaStreamSynchronize(s) != cudaSuccess) return -2;
  cudaFree(d_sq); cudaFree(d_first);
  if (first == ~0ull) return -1;
  __nv_bfloat16 g; float r;
  cudaMemcpy(&g, (const __nv_bfloat16*)got + first, 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(&r, ref + first, 4, cudaMemcpyDeviceToHost);
  *expected = r; *gotv = __bfloat162float(g);
  return (long long)first;
}

}  // namespace cuco_check
}  // namespace
#endif  // CUCO_CHECK_CUH
