// The process that runs the ranks (cuco's CPU harness): R threads that run the candidate's (or, in a
// process of its own, the frozen baseline's) cuco_run on the buffers the judge shares with it, and the
// ABI's link calls, which queue puts for the judge's link and wait for what it delivers.
//
// It is started by the judge from a fresh image of the executable (`harness --ranks cand|base FD`): it
// holds no clock of the judge's, no link model, no reference, no nonce and no result path. The judge stops it (SIGSTOP) whenever it is not being timed, so it runs only inside a timed call (or
// cuco_setup/cuco_teardown, untimed, before fresh inputs exist).
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <thread>
#include <vector>

#include "cuco_abi.h"
#include "cuco_clock.h"
#include "cuco_seccomp.h"
#include "cuco_shared.h"

using cuco_clock::Clock;
using namespace cuco_shared;

namespace {

int64_t now_ns() { return Clock::now().time_since_epoch().count(); }

// End this process with a reason the judge reads (it writes the verdict).
[[noreturn]] void end_with(Region* sh, const std::string& why) {
  size_t n = std::min(why.size(), sizeof sh->error - 1);
  memcpy(sh->error, why.data(), n);
  sh->error[n] = 0;
  _exit(3);
}

// A sense-reversing spin barrier that yields, with a time limit (a rank that never arrives is a bug).
struct SpinBarrier {
  Region* sh;
  int n;
  std::atomic<int> count{0}, sense{0};
  SpinBarrier(Region* s, int n_) : sh(s), n(n_) {}
  void wait() {
    int my = sense.load(std::memory_order_relaxed);
    if (count.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
      count.store(0, std::memory_order_relaxed);
      sense.store(my ^ 1, std::memory_order_release);
      return;
    }
    const int64_t start = now_ns();
    unsigned spins = 0;
    while (sense.load(std::memory_order_acquire) == my)
      if (++spins > 64) {
        std::this_thread::yield();
        if ((spins & 1023) == 0 && now_ns() - start > 20000000000LL)
          end_with(sh, "barrier wait exceeded 20 s: a rank never arrived (deadlock in the candidate)");
      }
  }
};

thread_local int t_rank = -1;   // the rank whose thread this is (-1: a thread the candidate started)

struct Port {   // what a rank's `link` points at
  Region* sh;
  int rank;
  bool record;   // the profiled call: waits, quiets and barriers are recorded
  SpinBarrier* barrier;
  int sock;      // the put socket (its other end is the judge's link)
};

void record(Region* sh, EventKind kind, int rank, int64_t t0) {
  uint32_t i = sh->n_events.fetch_add(1);
  if (i < kEvents) sh->events[i] = Event{kind, rank, t_rank != rank, 0, t0, now_ns()};
}

int link_put(void* l, int rank, int dst, int row, int col, int rows, int cols, const float* src, int src_ld,
             int flag) {
  Port* port = static_cast<Port*>(l);
  Region* sh = port->sh;
  if (rank != port->rank) {
    sh->foreign_put.store(1);
    return -1;
  }
  const int ld = sh->R * sh->N;
  if (dst < 0 || dst >= sh->R || flag < 0 || flag >= CUCO_FLAGS || rows < 0 || cols < 0 || row < 0 || col < 0 ||
      (int64_t)col + cols > ld || (int64_t)row + rows > sh->M || src_ld < cols)   // 64-bit: no sum wraps
    return -1;
  // The link reads the source from the memory it shares with this process: it must lie in it.
  const float* base = data(sh);
  const int64_t off = src - base;
  const int64_t last = rows ? off + (int64_t)(rows - 1) * src_ld + cols : off;
  if (src < base || off < 0 || last > sh->data_floats) return -1;
  PutReq q;
  q.from = rank; q.dst = dst; q.row = row; q.col = col; q.rows = rows; q.cols = cols; q.src_ld = src_ld;
  q.flag = flag; q.helper = t_rank != rank; q.src_off = off;
  sh->posted[rank].fetch_add(1);
  for (;;) {   // blocks while the link's queue is full, as a full ring did
    const ssize_t n = write(port->sock, &q, sizeof q);
    if (n == (ssize_t)sizeof q) break;
    if (n < 0 && errno == EINTR) continue;
    sh->posted[rank].fetch_sub(1);
    return -1;
  }
  return 0;
}

// Wait until *word reaches `count` (futex on the shared word): 0, or -1 after timeout_ms.
int wait_for(std::atomic<uint32_t>* word, uint32_t count, int timeout_ms) {
  const int64_t deadline = now_ns() + (int64_t)timeout_ms * 1000000;
  for (;;) {
    uint32_t v = word->load(std::memory_order_acquire);
    if ((int32_t)(v - count) >= 0) return 0;
    int64_t left = deadline - now_ns();
    if (left <= 0) return -1;
    struct timespec ts = ns_timespec(left);
    futex_wait(word, v, &ts);
  }
}

int link_wait(void* l, int rank, int flag, int count, int timeout_ms) {
  Port* port = static_cast<Port*>(l);
  Region* sh = port->sh;
  if (flag < 0 || flag >= CUCO_FLAGS || rank < 0 || rank >= sh->R) return -1;
  const int64_t t0 = port->record ? now_ns() : 0;
  int rc = count <= 0 ? 0 : wait_for(&sh->counters[rank][flag], (uint32_t)count, timeout_ms);
  if (port->record) record(sh, kWait, rank, t0);
  return rc;
}
int link_peek(void* l, int rank, int flag) {
  Region* sh = static_cast<Port*>(l)->sh;
  return flag >= 0 && flag < CUCO_FLAGS && rank >= 0 && rank < sh->R ? (int)sh->counters[rank][flag].load() : -1;
}
void link_quiet(void* l, int rank) {
  Port* port = static_cast<Port*>(l);
  Region* sh = port->sh;
  if (rank < 0 || rank >= sh->R) return;
  const int64_t t0 = port->record ? now_ns() : 0;
  wait_for(&sh->landed[rank], sh->posted[rank].load(), 20000);
  if (port->record) record(sh, kQuiet, rank, t0);
}
void barrier_call(void* ctx) {
  Port* port = static_cast<Port*>(ctx);
  const int64_t t0 = port->record ? now_ns() : 0;
  port->barrier->wait();
  if (port->record) record(port->sh, kBarrier, port->rank, t0);
}

// The problem a rank sees for the current config (its own buffers in the shared region, its own port).
cuco_problem problem(Region* sh, Port* port, int r) {
  float* d = data(sh);
  const int64_t M = sh->M, N = sh->N, K = sh->K, R = sh->R;
  cuco_problem q;
  memset(&q, 0, sizeof q);
  q.rank = r; q.ranks = (int)R; q.M = (int)M; q.N = (int)N; q.K = (int)K;
  q.A = d + sh->off_A;
  q.B = d + sh->off_B + r * K * N;
  q.out = d + sh->off_out + r * M * R * N;
  q.scratch = d + sh->off_scratch + r * M * N;
  q.link = port; q.put = link_put; q.wait = link_wait; q.peek = link_peek; q.quiet = link_quiet;
  q.barrier = barrier_call; q.barrier_ctx = port;
  return q;
}

int run_command(int cmd, bool candidate, const cuco_problem* q) {
  if (candidate) {
    switch (cmd) {
      case kSetup: return q->rank == 0 ? cuco_setup(q) : 0;
      case kCandidate: case kProfiled: return cuco_run(q);
      case kTeardown: if (q->rank == 0) cuco_teardown(); return 0;
      default: return -100;   // never the baseline's code in the candidate's process, nor the reverse
    }
  }
  switch (cmd) {
    case kBaseline: return baseline_run(q);
    case kCompOnly: return baseline_compute_only(q);
    case kCommOnly: return baseline_comm_only(q);
    case kSetup: case kTeardown: return 0;
    default: return -100;
  }
}

}  // namespace

// Entry point of a ranks' process: argv = harness --ranks cand|base FD SOCK (its region, its put socket).
int cuco_ranks_main(const char* role, int fd, int sock) {
  cuco_clock::init();
  const bool candidate = !strcmp(role, "cand");
  prctl(PR_SET_PDEATHSIG, SIGKILL);                // never outlive the judge
  if (!candidate) prctl(PR_SET_DUMPABLE, 0);       // the baseline's memory is not the candidate's to open
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < data_offset()) return 4;
  void* at = mmap(nullptr, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) return 4;
  close(fd);
  Region* sh = static_cast<Region*>(at);
  const int R = sh->R;
  if (R < 1 || R > kMaxRanks) return 4;
  SpinBarrier barrier(sh, R);
  std::vector<Port> ports(R), recording(R);
  for (int r = 0; r < R; ++r) {
    ports[r] = Port{sh, r, false, &barrier, sock};
    recording[r] = Port{sh, r, true, &barrier, sock};
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      uint32_t seen = 0;
      for (;;) {
        uint32_t s;
        while ((s = sh->cmd_seq.load(std::memory_order_acquire)) == seen) futex_wait(&sh->cmd_seq, seen, nullptr);
        seen = s;
        const int cmd = sh->cmd;
        if (cmd == kQuit) return;
        cuco_problem q = problem(sh, cmd == kProfiled ? &recording[r] : &ports[r], r);
        t_rank = r;
        sh->start_ns[r] = now_ns();
        sh->rc[r] = run_command(cmd, candidate, &q);
        sh->return_ns[r] = now_ns();
        t_rank = -1;
        if (sh->done.fetch_add(1) + 1 == (uint32_t)R) futex_wake(&sh->done);
      }
    });
#ifdef CUCO_HAVE_SECCOMP
  // Every thread of this process, from before the first candidate instruction (cuco_seccomp.h); the
  // baseline's process runs under the same filter, so both pay the same for their system calls.
  std::string why = cuco_seccomp::install(sh->error, sizeof sh->error);
  if (!why.empty()) end_with(sh, "cannot install the system-call filter: " + why);
#endif
  // Ready: the judge stops this process now, and lets it run only for its calls.
  sh->ready.store(1);
  futex_wake(&sh->ready);
  for (auto& t : threads) t.join();
  return 0;
}
