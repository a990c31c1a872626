// Variant of the demo's schedule block: comm_thread (see workload.yaml).
// EVOLVE-BLOCK-START schedule
// cuco:design placement=chunked sync=chunk_flags issuer=comm_thread
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

// A communication thread of this rank posts each chunk to the link once the compute thread has
// published it (a release counter); joined before returning, then arrivals are awaited.
extern "C" int cuco_run(const cuco_problem* p) {
  const int N = p->N, ld = p->ranks * N, rank = p->rank;
  const int step = kChunkRows > 0 ? kChunkRows : 1;
  const int chunks = (p->M + step - 1) / step;
  std::atomic<int> ready{0};
  std::thread comm([&] {
    for (int c = 0; c < chunks; ++c) {
      while (ready.load(std::memory_order_acquire) <= c) std::this_thread::yield();
      const int r0 = c * step, r1 = r0 + step < p->M ? r0 + step : p->M;
      for (int s = 0; s < p->ranks; ++s) {
        const int peer = kStagger ? (rank + s) % p->ranks : s;
        if (peer != rank) p->put(p->link, rank, peer, r0, rank * N, r1 - r0, N, p->scratch + (size_t)r0 * N, N, 0);
      }
    }
  });
  for (int c = 0; c < chunks; ++c) {
    const int r0 = c * step, r1 = r0 + step < p->M ? r0 + step : p->M;
    gemm_rows(p, r0, r1, p->scratch + (size_t)r0 * N, N);
    for (int i = r0; i < r1; ++i) memcpy(p->out + (size_t)i * ld + (size_t)rank * N, p->scratch + (size_t)i * N, sizeof(float) * N);
    ready.store(c + 1, std::memory_order_release);
  }
  comm.join();
  return p->wait(p->link, rank, 0, chunks * (p->ranks - 1), 20000) == 0 ? 0 : 6;
}
// EVOLVE-BLOCK-END
