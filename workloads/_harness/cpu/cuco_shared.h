// The memory the CPU harness's judge shares with a process that runs the ranks.
//
// The judge (the harness's first process) owns the clock, the link model, the pristine inputs, the
// reference, the nonce, the verdict and result.json. The ranks run in processes of their own, started from
// a fresh image of the same executable (exec: nothing of the judge's memory is in them): one for the
// candidate, one for the frozen baseline, each with a region of its own (the candidate's process never maps
// the baseline's). The judge reads a region as untrusted input (bounds-checked, reset before every call)
// and decides nothing from it but what it verifies: the geometry, the data area's size and every time it
// takes are its own copies, which the fields below only mirror for the ranks' process.
#pragma once
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cuco_abi.h"

namespace cuco_shared {

constexpr int kMaxRanks = 64;
constexpr uint32_t kEvents = 20000;   // the profiled call's records of waits, quiets and barriers
constexpr size_t kPage = 4096;

enum Cmd : int32_t { kIdle = 0, kSetup, kCandidate, kProfiled, kBaseline, kCompOnly, kCommOnly, kTeardown, kQuit };
enum EventKind : int32_t { kWait = 1, kQuiet = 2, kBarrier = 3 };

// A put as the ranks' process sends it: one datagram on its put socket (the kernel stamps when it was
// sent); the judge's link reads it, checks it and carries it.
struct PutReq {
  int32_t from, dst, row, col, rows, cols, src_ld, flag, helper;
  int64_t src_off;             // where the source starts, in floats from the start of the data area
};

struct Event {   // a rank's wait, quiet or barrier in the profiled call (CLOCK_MONOTONIC, ns)
  int32_t kind, rank, helper, pad;
  int64_t t0_ns, t1_ns;
};

struct Region {
  // The problem of the current config (written by the judge while the ranks' processes are stopped).
  int32_t R, M, N, K;
  int64_t off_A, off_B, off_out, off_scratch;   // floats from the data area's start; B, out, scratch per rank
  int64_t data_floats;                          // the data area's size
  // A command: the judge writes cmd, then bumps cmd_seq (futex); every rank thread runs it and adds one to
  // done (futex) when it has returned.
  std::atomic<uint32_t> ready;   // a ranks' process has started its threads and installed its filter
  std::atomic<uint32_t> cmd_seq;
  int32_t cmd;
  std::atomic<uint32_t> done;
  int32_t rc[kMaxRanks];
  // The link: puts go to the judge as datagrams (PutReq); the judge raises counters[dst][flag] when a put
  // has landed, and landed[from] (what quiet waits for, against the ranks' own count of posted puts).
  std::atomic<uint32_t> posted[kMaxRanks], landed[kMaxRanks];
  std::atomic<int32_t> foreign_put;   // a put named another rank's link (seen in the ranks' process)
  // The profiled call's rank-side records.
  int64_t start_ns[kMaxRanks], return_ns[kMaxRanks];
  std::atomic<uint32_t> n_events;
  Event events[kEvents];
  std::atomic<uint32_t> counters[kMaxRanks][CUCO_FLAGS];
  char error[1024];   // why a ranks' process ended itself (a refused system call, a deadlock)
};

inline size_t data_offset() { return (sizeof(Region) + kPage - 1) / kPage * kPage; }
inline float* data(Region* r) { return reinterpret_cast<float*>(reinterpret_cast<char*>(r) + data_offset()); }

// Futexes on shared memory (not the _PRIVATE kind: two processes wait and wake on the same word).
inline long futex_wait(std::atomic<uint32_t>* word, uint32_t seen, const struct timespec* rel) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, rel, nullptr, 0);
}
inline void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
inline struct timespec ns_timespec(int64_t ns) {
  if (ns < 0) ns = 0;
  return {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
}

}  // namespace cuco_shared
