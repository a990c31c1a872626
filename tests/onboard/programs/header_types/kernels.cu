// The kernels and the wrappers that launch them.
#include <cuda_runtime.h>
#include "shared.h"

__global__ void decay_kernel(const float* in, float* out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * kDecay;
}

__global__ void sharpen_kernel(const float* in, float* out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * (2.0f - kDecay);
}

void launch_decay(const float* in, float* out, size_t n, Geometry g, cudaStream_t s) {
  decay_kernel<<<g.blocks, g.threads, 0, s>>>(in, out, n);
}

void launch_sharpen(const float* in, float* out, size_t n, Geometry g, cudaStream_t s) {
  sharpen_kernel<<<g.blocks, g.threads, 0, s>>>(in, out, n);
}
