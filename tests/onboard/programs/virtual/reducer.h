// The implementations main() can run: one interface, two implementations, and the factory that makes the
// one this build uses.
#pragma once
#include <cstddef>
#include <memory>
#include <cuda_runtime.h>
#include <nccl.h>

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual void run(const float* in, float* partial, float* out, size_t n, ncclComm_t comm,
                   cudaStream_t stream) = 0;
};

class SquareReducer : public Reducer {
 public:
  void run(const float* in, float* partial, float* out, size_t n, ncclComm_t comm, cudaStream_t stream) override;
};

class CubeReducer : public Reducer {
 public:
  void run(const float* in, float* partial, float* out, size_t n, ncclComm_t comm, cudaStream_t stream) override;
};

std::unique_ptr<Reducer> make_reducer();
void reduce_all(float* buf, size_t n, ncclComm_t comm, cudaStream_t stream);
