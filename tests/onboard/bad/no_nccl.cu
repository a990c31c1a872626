// A CUDA program with no NCCL call: nothing for cuco to co-design.
#include <cuda_runtime.h>
__global__ void axpy(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] += 2.f * x[i]; }
int main() {
  float *x, *y;
  cudaMalloc(&x, 256 * sizeof(float));
  cudaMalloc(&y, 256 * sizeof(float));
  for (int i = 0; i < 10; ++i) axpy<<<1, 256>>>(x, y, 256);
  cudaDeviceSynchronize();
  return 0;
}
