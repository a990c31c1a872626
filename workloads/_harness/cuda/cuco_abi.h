// cuco_abi.h -- the C ABI between the frozen CUDA harness and a candidate (or the frozen baseline).
//
// The candidate is compiled as its own translation unit and exports exactly three functions:
//     int cuco_candidate_setup(cuco_ctx*);     // collective: every rank calls it, in the same order
//     int cuco_candidate_run(cuco_ctx*);       // one call = one full operation (timed)
//     int cuco_candidate_teardown(cuco_ctx*);  // collective
// The frozen baseline exports the same three with the prefix cuco_baseline_, plus
//     int cuco_baseline_run_compute(cuco_ctx*);  // the baseline's computation alone (no communication)
//     int cuco_baseline_run_comm(cuco_ctx*);     // the baseline's communication alone
// which give the harness the overlap bound (T_comp + T_comm) / max(T_comp, T_comm).
// Every function returns 0 on success; on failure it returns non-zero and may write ctx->error.
//
// Rules the harness enforces (see harness.cu):
//   * run() enqueues its work and returns; all of its work must be joined to ctx->stream (wait on an
//     event recorded on any side stream) before run() returns. The timer is an event pair on
//     ctx->stream; a device-wide synchronize follows, and the harness compares the host wall time with
//     the event time, so work that escapes ctx->stream is caught ("work escaped the timed stream").
//   * Inputs are read-only (checked bit-exact after the calls). Outputs are poisoned (all bytes 0xFF,
//     a NaN for bf16/fp32) before every call, so every element must be written by every call.
//   * Inputs and outputs live in ncclMemAlloc memory registered as NCCL symmetric windows
//     (NCCL_WIN_COLL_SYMMETRIC), so a candidate can reach peers' buffers with the NCCL device API (LSA)
//     or with copy-engine copies to peer pointers. Scratch (flags, staging) belongs to the candidate:
//     allocate it in setup, free it in teardown.
//   * Every spin-wait a candidate writes must be bounded (see cuco_device.cuh: cuco_wait_geq); when a
//     bound expires, raise *ctx->timeout_flag (a device word the harness reads after each call); the
//     harness reports "spin-wait timeout". A wait that is not bounded and never ends is killed with all
//     ranks at the rank timeout.
//   * Nothing a candidate prints is believed; the harness verifies and times, and writes result.json.
#ifndef CUCO_ABI_H
#define CUCO_ABI_H

#include <stddef.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUCO_ABI_VERSION 1
#define CUCO_MAX_BUFFERS 8
#define CUCO_MAX_PARAMS 16

typedef struct cuco_buffer {
  const char* name;     // e.g. "A", "B", "C"
  void* ptr;            // this rank's device pointer (ncclMemAlloc)
  size_t bytes;         // identical on every rank
  ncclWindow_t win;     // NCCL symmetric window over [ptr, ptr + bytes)
} cuco_buffer;

typedef struct cuco_param {
  const char* name;
  long long value;
} cuco_param;

typedef struct cuco_ctx {
  int abi_version;          // CUCO_ABI_VERSION
  int rank, nranks;         // this process's rank, ranks in the job
  int device;               // CUDA device of this rank (already current)
  ncclComm_t comm;          // NCCL communicator of all ranks (the candidate may create a devComm on it)
  cudaStream_t stream;      // the timed stream (non-blocking); join all work to it before run() returns
  int sm_count;             // multiprocessors of this device
  int nparams;
  cuco_param params[CUCO_MAX_PARAMS];   // the config's params (integers), e.g. M, N, K
  int ninputs, noutputs;
  cuco_buffer inputs[CUCO_MAX_BUFFERS];
  cuco_buffer outputs[CUCO_MAX_BUFFERS];
  unsigned long long spin_timeout_ns;   // bound for every device spin-wait
  unsigned int* timeout_flag;           // device word: set non-zero when a bounded wait expires
  void* state;              // the implementation's own state (set in setup)
  char error[256];          // message on failure
  long long iteration;      // index of this call of run() (0, 1, 2, ... per side): a region's loop variable
  struct cuco_host_comm* host_comm;   // host collectives among the ranks' processes (cuco_host_allreduce, ...)
} cuco_ctx;

// Value of param `name`, or `dflt` when the config does not set it.
static inline long long cuco_param_get(const cuco_ctx* c, const char* name, long long dflt) {
  for (int i = 0; i < c->nparams; i++) {
    const char* a = c->params[i].name; const char* b = name;
    while (*a && *a == *b) { a++; b++; }
    if (*a == 0 && *b == 0) return c->params[i].value;
  }
  return dflt;
}

int cuco_candidate_setup(cuco_ctx* ctx);
int cuco_candidate_run(cuco_ctx* ctx);
int cuco_candidate_teardown(cuco_ctx* ctx);

// Stream memory operations (a stream waits for, or writes, a 32-bit word in device memory without a kernel):
// the driver's cuStreamWaitValue32 / cuStreamWriteValue32, looked up by the harness before any candidate
// code runs; the signatures of PFN_cuStreamWaitValue32_v11070 / PFN_cuStreamWriteValue32_v11070. A
// candidate may not look driver functions up itself: the symbol policy refuses cudaGetDriverEntryPoint*
// and cuGetProcAddress*, which hand out any driver function by name, denied ones included.
CUresult cuco_stream_wait_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuco_stream_write_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);

// Host collectives among the ranks' processes, as MPI's on MPI_COMM_WORLD (a region's MPI_Allreduce of a
// norm after a cudaStreamSynchronize): blocking, collective (every rank calls them, in the same order), on
// host memory, through memory the harness shares among the ranks' processes only. The arguments mirror
// MPI_Allreduce / MPI_Reduce / MPI_Bcast / MPI_Barrier; sums are taken in rank order, so every rank gets
// the same bits. Each returns 0, or non-zero with cuco_host_comm_error(comm) saying why (a bad datatype or
// root, or a rank that did not arrive within the wait bound: the communicator then refuses every later call).
// The candidate's, the baseline's and the verification's reference run's are communicators over separate memory.
typedef enum cuco_host_datatype {
  CUCO_HOST_BYTE = 1, CUCO_HOST_CHAR, CUCO_HOST_INT, CUCO_HOST_LONG_LONG, CUCO_HOST_FLOAT, CUCO_HOST_DOUBLE
} cuco_host_datatype;
typedef enum cuco_host_op { CUCO_HOST_SUM = 1, CUCO_HOST_MAX, CUCO_HOST_MIN } cuco_host_op;
#define CUCO_HOST_IN_PLACE ((const void*)1)   // MPI_IN_PLACE: the send buffer is the receive buffer
int cuco_host_allreduce(const void* sendbuf, void* recvbuf, size_t count, cuco_host_datatype datatype,
                        cuco_host_op op, struct cuco_host_comm* comm);
int cuco_host_reduce(const void* sendbuf, void* recvbuf, size_t count, cuco_host_datatype datatype,
                     cuco_host_op op, int root, struct cuco_host_comm* comm);
int cuco_host_bcast(void* buffer, size_t count, cuco_host_datatype datatype, int root, struct cuco_host_comm* comm);
int cuco_host_barrier(struct cuco_host_comm* comm);
const char* cuco_host_comm_error(const struct cuco_host_comm* comm);

int cuco_baseline_setup(cuco_ctx* ctx);
int cuco_baseline_run(cuco_ctx* ctx);
int cuco_baseline_run_compute(cuco_ctx* ctx);
int cuco_baseline_run_comm(cuco_ctx* ctx);
int cuco_baseline_teardown(cuco_ctx* ctx);

#ifdef __cplusplus
}
#endif
#endif  // CUCO_ABI_H
