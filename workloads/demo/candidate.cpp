// cuco demo candidate: C_r = A * B_r on every rank, then an all-gather of C into every rank's output.
// Ranks are threads; out[q] and scratch[q] of another rank are "peer memory" (the analog of NVLink).
// Only the EVOLVE-BLOCK may change. The harness (frozen) owns inputs, verification and timing.
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "cuco_abi.h"

// EVOLVE-BLOCK-START schedule
// cuco:design placement=sequential sync=barrier issuer=compute_thread
static const int kChunkRows = 32;  // cuco:knob chunk_rows
static const int kStagger = 0;  // cuco:knob stagger
static void gemm_rows(const cuco_problem* p, int rank, int r0, int r1, float* dst, int ld) {
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

// Host-driven: compute the whole tile, meet at a barrier, then pull every tile (no overlap).
extern "C" int cuco_run(const cuco_problem* p, int rank) {
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
// EVOLVE-BLOCK-END

extern "C" int cuco_setup(const cuco_problem*) { return 0; }
extern "C" void cuco_teardown(void) {}
