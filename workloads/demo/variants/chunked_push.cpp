// Variant of the demo's schedule block: chunked_push (see workload.yaml).
// EVOLVE-BLOCK-START schedule
// cuco:design placement=chunked sync=barrier issuer=compute_thread
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

// Compute a chunk of rows, hand it to the link at once (it moves while the next chunk computes),
// then make sure every put has landed everywhere: quiet our own link, then a barrier.
extern "C" int cuco_run(const cuco_problem* p) {
  const int N = p->N, ld = p->ranks * N, rank = p->rank;
  const int step = kChunkRows > 0 ? kChunkRows : 1;
  for (int r0 = 0; r0 < p->M; r0 += step) {
    const int r1 = r0 + step < p->M ? r0 + step : p->M;
    float* rows = p->scratch + (size_t)r0 * N;
    gemm_rows(p, r0, r1, rows, N);
    for (int s = 0; s < p->ranks; ++s) {
      const int peer = kStagger ? (rank + s) % p->ranks : s;
      if (peer != rank) p->put(p->link, rank, peer, r0, rank * N, r1 - r0, N, rows, N, 0);
    }
    for (int i = r0; i < r1; ++i) memcpy(p->out + (size_t)i * ld + (size_t)rank * N, p->scratch + (size_t)i * N, sizeof(float) * N);
  }
  p->quiet(p->link, rank);
  p->barrier(p->barrier_ctx);
  return 0;
}
// EVOLVE-BLOCK-END
