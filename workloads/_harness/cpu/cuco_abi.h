// cuco CPU harness ABI: the candidate is its own translation unit and talks to the harness only
// through these C functions. Ranks are threads of one process; "peer memory" is the other ranks'
// buffers, reachable through the pointer tables below (the analog of NVLink load/store).
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuco_problem {
  int ranks;                   // number of ranks (threads)
  int M, N, K;                 // C_r = A (M x K) * B_r (K x N); N is the columns per rank
  const float* A;              // M x K, row-major, shared by every rank, read-only
  const float* const* B;       // B[r]: K x N row-major, rank r's slice, read-only
  float* const* out;           // out[r]: M x (ranks*N) row-major, rank r's gathered output;
                               // tile p lives in columns [p*N, (p+1)*N). Every rank may write any out[q].
  float* const* scratch;       // scratch[r]: M x N floats owned by rank r, readable by every rank
  int* const* flags;           // flags[r]: CUCO_FLAGS ints owned by rank r, zeroed before every call
  void (*barrier)(void* ctx);  // a barrier among all ranks
  void* barrier_ctx;
} cuco_problem;

enum { CUCO_FLAGS = 4096 };

// The candidate (the mutable program).
int cuco_setup(const cuco_problem* p);          // once per problem config, before any call
int cuco_run(const cuco_problem* p, int rank);  // called by every rank's thread at once; 0 = ok
void cuco_teardown(void);

// The frozen baseline (the host-driven reference), compiled from the workload's baseline.cpp.
int baseline_run(const cuco_problem* p, int rank);
int baseline_compute_only(const cuco_problem* p, int rank);
int baseline_comm_only(const cuco_problem* p, int rank);

#ifdef __cplusplus
}
#endif
