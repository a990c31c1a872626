// The collective is picked at run time through a function pointer: the analysis cannot know which runs.
#include <cstdlib>
#include <nccl.h>
#include <cuda_runtime.h>
typedef ncclResult_t (*reduce_fn)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
int main(int argc, char** argv) {
  ncclComm_t comm;
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclCommInitRank(&comm, 1, id, 0);
  float* x;
  cudaMalloc(&x, 1024 * sizeof(float));
  reduce_fn fn = ncclAllReduce;
  for (int i = 0; i < 10; ++i) fn(x, x, 1024, ncclFloat, ncclSum, comm, 0);
  return 0;
}
