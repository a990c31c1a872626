// cuco CPU harness ABI. The candidate is its own translation unit and talks to the harness only
// through these C functions. Ranks are threads of one process; each sees only its own buffers.
// Peers are reached through the *link*: an asynchronous copy engine per rank (the analog of NVLink's
// copy engines or a NIC) that moves bytes at a fixed bandwidth without using the rank's core and
// raises a counter on the destination when they have landed.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuco_problem {
  int rank, ranks;             // this rank, and how many there are
  int M, N, K;                 // C_r = A (M x K) * B_r (K x N); N is the columns per rank
  const float* A;              // M x K, row-major, the same on every rank, read-only
  const float* B;              // K x N, row-major: this rank's B_r, read-only
  float* out;                  // M x (ranks*N), row-major: this rank's gathered output; tile p lives
                               // in columns [p*N, (p+1)*N). Poisoned (NaN) before every call.
  float* scratch;              // M x N floats of this rank's own (poisoned before every call)
  void* link;
  // Queue a copy of rows x cols floats from src (row stride src_ld, in floats) into rank dst_rank's
  // `out` at (row, col). Returns at once (0 = queued). src must stay unchanged until it has landed.
  // When it has landed, counter `flag` of dst_rank is incremented. `rank` is the caller's (p->rank): a put
  // on another rank's link fails the call, and so does a peer's tile that did not arrive by put.
  int (*put)(void* link, int rank, int dst_rank, int row, int col, int rows, int cols, const float* src,
             int src_ld, int flag);
  // Wait until this rank's counter `flag` reaches `count`: 0, or -1 after timeout_ms.
  int (*wait)(void* link, int rank, int flag, int count, int timeout_ms);
  int (*peek)(void* link, int rank, int flag);   // the counter's value now, without waiting
  void (*quiet)(void* link, int rank);           // wait until every put this rank queued has landed
  void (*barrier)(void* ctx);                    // a barrier among all ranks
  void* barrier_ctx;
} cuco_problem;

enum { CUCO_FLAGS = 4096 };   // counters per rank, all zero at the start of every call

// The candidate (the mutable program).
int cuco_setup(const cuco_problem* p);   // once per problem config, before any call (rank 0's view)
int cuco_run(const cuco_problem* p);     // called by every rank's thread at once; 0 = ok
void cuco_teardown(void);

// The frozen baseline (the host-driven reference). baseline_run is the seed itself, renamed.
int baseline_run(const cuco_problem* p);
int baseline_compute_only(const cuco_problem* p);
int baseline_comm_only(const cuco_problem* p);

#ifdef __cplusplus
}
#endif
