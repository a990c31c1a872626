// The frozen host-driven baseline of the demo (and the reference the speedup is measured against):
// every rank computes its whole tile, all ranks meet at a barrier, then each rank copies every tile
// into its own output. Compute and communication never overlap.
//
// baseline_run is the seed's code, written the same way (one caller per helper, so the compiler treats
// both alike): the seed measures 1.0x against it. Compute-only and communication-only copies give
// the overlap bound.
#include <cstring>

#include "cuco_abi.h"

namespace {

const int kStagger = 0;

void gemm_rows(const cuco_problem* p, int rank, int r0, int r1, float* dst, int ld) {
  const int N = p->N, K = p->K;
  const float* B = p->B[rank];
  for (int i = r0; i < r1; ++i) {
    float* c = dst + (size_t)(i - r0) * ld;
    for (int j = 0; j < N; ++j) c[j] = 0.f;
    const float* a = p->A + (size_t)i * K;
    for (int k = 0; k < K; ++k) {
      const float av = a[k];
      const float* b = B + (size_t)k * N;
      for (int j = 0; j < N; ++j) c[j] += av * b[j];
    }
  }
}


void gemm_rows_compute_only(const cuco_problem* p, int rank, int r0, int r1, float* dst, int ld) {
  const int N = p->N, K = p->K;
  const float* B = p->B[rank];
  for (int i = r0; i < r1; ++i) {
    float* c = dst + (size_t)(i - r0) * ld;
    for (int j = 0; j < N; ++j) c[j] = 0.f;
    const float* a = p->A + (size_t)i * K;
    for (int k = 0; k < K; ++k) {
      const float av = a[k];
      const float* b = B + (size_t)k * N;
      for (int j = 0; j < N; ++j) c[j] += av * b[j];
    }
  }
}



}  // namespace

extern "C" int baseline_run(const cuco_problem* p, int rank) {
  const int N = p->N, ld = p->ranks * N;
  gemm_rows(p, rank, 0, p->M, p->scratch[rank], N);
  p->barrier(p->barrier_ctx);
  for (int s = 0; s < p->ranks; ++s) {
    const int peer = kStagger ? (rank + s) % p->ranks : s;
    const float* src = p->scratch[peer];
    float* dst = p->out[rank] + (size_t)peer * N;
    for (int i = 0; i < p->M; ++i) memcpy(dst + (size_t)i * ld, src + (size_t)i * N, sizeof(float) * N);
  }
  return 0;
}

extern "C" int baseline_compute_only(const cuco_problem* p, int rank) {
  gemm_rows_compute_only(p, rank, 0, p->M, p->scratch[rank], p->N);
  return 0;
}

extern "C" int baseline_comm_only(const cuco_problem* p, int rank) {
  const int N = p->N, ld = p->ranks * N;
  p->barrier(p->barrier_ctx);
  for (int peer = 0; peer < p->ranks; ++peer) {
    const float* src = p->scratch[peer];
    float* dst = p->out[rank] + (size_t)peer * N;
    for (int i = 0; i < p->M; ++i) memcpy(dst + (size_t)i * ld, src + (size_t)i * N, sizeof(float) * N);
  }
  return 0;
}
