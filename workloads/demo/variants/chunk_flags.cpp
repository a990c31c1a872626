// Variant of the demo's schedule block: chunk flags, pull (see workload.yaml).
// EVOLVE-BLOCK-START schedule
// cuco:design placement=chunked sync=chunk_flags issuer=compute_thread
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

static void copy_chunk(const cuco_problem* p, int rank, int peer, int c, int step) {
  const int N = p->N, ld = p->ranks * N;
  const int r0 = c * step, r1 = r0 + step < p->M ? r0 + step : p->M;
  const float* src = p->scratch[peer];
  float* dst = p->out[rank] + (size_t)peer * N;
  for (int i = r0; i < r1; ++i) memcpy(dst + (size_t)i * ld, src + (size_t)i * N, sizeof(float) * N);
}

// Each chunk is published with a release flag; between its own chunks a rank pulls whatever its
// peers have finished, then waits (bounded) for the rest.
extern "C" int cuco_run(const cuco_problem* p, int rank) {
  const int step = kChunkRows > 0 ? kChunkRows : 1;
  const int chunks = (p->M + step - 1) / step;
  if (chunks > CUCO_FLAGS) return 5;
  std::vector<int> next(p->ranks, 0);
  auto pull_ready = [&](bool wait) {
    const time_t start = time(nullptr);
    for (int s = 0; s < p->ranks; ++s) {
      const int peer = kStagger ? (rank + s) % p->ranks : s;
      while (next[peer] < chunks) {
        if (!__atomic_load_n(&p->flags[peer][next[peer]], __ATOMIC_ACQUIRE)) {
          if (!wait) break;
          if (time(nullptr) - start > 10) return false;
          std::this_thread::yield();
          continue;
        }
        copy_chunk(p, rank, peer, next[peer]++, step);
      }
    }
    return true;
  };
  for (int c = 0; c < chunks; ++c) {
    const int r0 = c * step, r1 = r0 + step < p->M ? r0 + step : p->M;
    gemm_rows(p, rank, r0, r1, p->scratch[rank] + (size_t)r0 * p->N, p->N);
    __atomic_store_n(&p->flags[rank][c], 1, __ATOMIC_RELEASE);
    pull_ready(false);
  }
  return pull_ready(true) ? 0 : 6;
}
// EVOLVE-BLOCK-END
