// The frozen baseline's compute-only and communication-only halves (the overlap bound's parts).
#include <cstring>

#include "cuco_abi.h"

extern "C" int baseline_compute_only(const cuco_problem* p) {
  const int N = p->N, K = p->K;
  for (int i = 0; i < p->M; ++i) {
    float* c = p->scratch + (size_t)i * N;
    for (int j = 0; j < N; ++j) c[j] = 0.f;
    const float* a = p->A + (size_t)i * K;
    for (int k = 0; k < K; ++k) {
      const float av = a[k];
      const float* b = p->B + (size_t)k * N;
      for (int j = 0; j < N; ++j) c[j] += av * b[j];
    }
  }
  return 0;
}

extern "C" int baseline_comm_only(const cuco_problem* p) {
  const int N = p->N, rank = p->rank;
  p->barrier(p->barrier_ctx);
  for (int peer = 0; peer < p->ranks; ++peer)
    if (peer != rank) p->put(p->link, rank, peer, 0, rank * N, p->M, N, p->scratch, N, 0);
  return p->wait(p->link, rank, 0, p->ranks - 1, 20000) == 0 ? 0 : 6;
}
