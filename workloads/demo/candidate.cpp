// cuco demo candidate: C_r = A * B_r on every rank, then an all-gather of the tiles into every rank's
// output. Ranks are threads; peers are reached only through the link (an asynchronous copy engine per
// rank, the analog of NVLink copy engines): see cuco_abi.h. Only the EVOLVE-BLOCK may change; the
// harness (frozen) owns inputs, verification and timing.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "cuco_abi.h"

// EVOLVE-BLOCK-START schedule
// cuco:design placement=sequential sync=barrier issuer=compute_thread
static const int kChunkRows = 32;  // cuco:knob chunk_rows
static const int kStagger = 0;  // cuco:knob stagger
static void gemm_rows(const cuco_problem* p, int r0, int r1, float* dst, int ld) {
  const int N = p->N, K = p->K;
  for (int i = r0; i < r1; ++i) {
    float* c = dst + (size_t)(i - r0) * ld;
    for (int j = 0; j < N; ++j) c[j] = 0.f;
    const float* a = p->A + (size_t)i * K;
    for (int k = 0; k < K; ++k) {
      const float av = a[k];
      const float* b = p->B + (size_t)k * N;
      for (int j = 0; j < N; ++j) c[j] += av * b[j];
    }
  }
}

// Host-driven: compute the whole tile, meet at a barrier (the collective's entry), hand the tile to
// the link as one transfer per peer, then wait until every peer's tile has arrived. No overlap.
extern "C" int cuco_run(const cuco_problem* p) {
  const int N = p->N, ld = p->ranks * N, rank = p->rank;
  gemm_rows(p, 0, p->M, p->scratch, N);
  for (int i = 0; i < p->M; ++i) memcpy(p->out + (size_t)i * ld + (size_t)rank * N, p->scratch + (size_t)i * N, sizeof(float) * N);
  p->barrier(p->barrier_ctx);
  for (int s = 0; s < p->ranks; ++s) {
    const int peer = kStagger ? (rank + s) % p->ranks : s;
    if (peer != rank) p->put(p->link, rank, peer, 0, rank * N, p->M, N, p->scratch, N, 0);
  }
  return p->wait(p->link, rank, 0, p->ranks - 1, 20000) == 0 ? 0 : 6;
}
// EVOLVE-BLOCK-END

extern "C" int cuco_setup(const cuco_problem*) { return 0; }
extern "C" void cuco_teardown(void) {}
