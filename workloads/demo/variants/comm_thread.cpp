// Variant of the demo's schedule block: chunk flags with a communication thread (see workload.yaml).
// EVOLVE-BLOCK-START schedule
// cuco:design placement=chunked sync=chunk_flags issuer=comm_thread
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

// The compute thread computes and publishes chunks; a communication thread of the same rank pulls
// every rank's chunks into our output as their flags rise. Joined before returning.
extern "C" int cuco_run(const cuco_problem* p, int rank) {
  const int N = p->N, ld = p->ranks * N;
  const int step = kChunkRows > 0 ? kChunkRows : 1;
  const int chunks = (p->M + step - 1) / step;
  if (chunks > CUCO_FLAGS) return 5;
  bool comm_ok = true;
  std::thread comm([&] {
    const time_t start = time(nullptr);
    for (int c = 0; c < chunks; ++c) {
      const int r0 = c * step, r1 = r0 + step < p->M ? r0 + step : p->M;
      for (int s = 0; s < p->ranks; ++s) {
        const int peer = kStagger ? (rank + s) % p->ranks : s;
        while (!__atomic_load_n(&p->flags[peer][c], __ATOMIC_ACQUIRE)) {
          if (time(nullptr) - start > 10) { comm_ok = false; return; }
          std::this_thread::yield();
        }
        const float* src = p->scratch[peer];
        float* dst = p->out[rank] + (size_t)peer * N;
        for (int i = r0; i < r1; ++i) memcpy(dst + (size_t)i * ld, src + (size_t)i * N, sizeof(float) * N);
      }
    }
  });
  for (int c = 0; c < chunks; ++c) {
    const int r0 = c * step, r1 = r0 + step < p->M ? r0 + step : p->M;
    gemm_rows(p, rank, r0, r1, p->scratch[rank] + (size_t)r0 * N, N);
    __atomic_store_n(&p->flags[rank][c], 1, __ATOMIC_RELEASE);
  }
  comm.join();
  return comm_ok ? 0 : 6;
}
// EVOLVE-BLOCK-END
