// The communication helper every implementation calls.
#include <nccl.h>
#include <cuda_runtime.h>

void reduce_all(float* buf, size_t n, ncclComm_t comm, cudaStream_t stream) {
  ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream);
}
