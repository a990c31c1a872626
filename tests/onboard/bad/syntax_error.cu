// Does not parse: a launch with an unbalanced bracket.
#include <nccl.h>
__global__ void k(float* x) { x[threadIdx.x] = 1.f; }
int main() {
  float* x;
  ncclComm_t comm;
  k<<<1, 32>>>(x;
  ncclAllReduce(x, x, 32, ncclFloat, ncclSum, comm, 0);
  return 0;
}
