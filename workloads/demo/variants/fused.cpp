// Variant of the demo's schedule block: fused (see workload.yaml).
// EVOLVE-BLOCK-START schedule
// cuco:design placement=fused sync=barrier issuer=compute_thread
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

// Fused: every finished row goes from a small buffer straight into every rank's output; the tile is
// never written to memory and read back.
extern "C" int cuco_run(const cuco_problem* p, int rank) {
  const int N = p->N, ld = p->ranks * N;
  const int step = kChunkRows > 0 ? kChunkRows : 1;
  std::vector<float> rows((size_t)step * N);
  for (int r0 = 0; r0 < p->M; r0 += step) {
    const int r1 = r0 + step < p->M ? r0 + step : p->M;
    gemm_rows(p, rank, r0, r1, rows.data(), N);
    for (int s = 0; s < p->ranks; ++s) {
      const int peer = kStagger ? (rank + s) % p->ranks : s;
      float* dst = p->out[peer] + (size_t)rank * N;
      for (int i = r0; i < r1; ++i) memcpy(dst + (size_t)i * ld, rows.data() + (size_t)(i - r0) * N, sizeof(float) * N);
    }
  }
  p->barrier(p->barrier_ctx);
  return 0;
}
// EVOLVE-BLOCK-END
