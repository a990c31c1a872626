// cuco's frozen CPU harness for the GEMM + all-gather analog: the judge.
//
// It owns everything a number depends on: the inputs (from the seed it is given), the reference (fp64),
// verification of every rank's output after every call (the compute against a tolerance, the gather
// bit-exact against the tile its owner computed), the link model, the timing (caches flushed, warm-ups,
// the median of the max over ranks, baseline and candidate in rounds, adaptive: see `ratio_interval`), the nonce and the
// verdict, written as JSON to --result. Nothing the candidate prints is read by anyone.
//
// The ranks run in two processes of their own (ranks.cpp), started from a fresh image of this executable:
// one runs the candidate, one the frozen baseline. They share with the judge one region of memory
// (cuco_shared.h: the inputs, the outputs, scratch, the link's queue and counters) and nothing else. The
// judge keeps each of them stopped (SIGSTOP) except while it is timing one of its calls: a call's time is
// the judge's own clock from letting the process run to having stopped it again, so the candidate has no
// untimed moment with a call's inputs, and none at all while the baseline runs.
//
//   harness --spec spec.json --result result.json [--nonce-stdin]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <grp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "cuco_abi.h"
#include "cuco_clock.h"
#include "cuco_shared.h"
#include "json_min.h"

using Clock = cuco_clock::Clock;   // the judge's; no candidate code runs in this process
using jsonmin::num;
using jsonmin::quote;
using namespace cuco_shared;

int cuco_ranks_main(const char* role, int fd, int sock);   // ranks.cpp

namespace {

std::string g_mode = "verify", g_nonce;

// The verdict's channel. result.json is created by the judge before any candidate code exists (whatever an
// earlier attempt left is removed first), with O_EXCL and O_NOFOLLOW: the file is the judge's own, not one
// a candidate prepared. The verdict goes through that descriptor with every error checked, after both
// ranks' processes have ended; the path must then still name the judge's file, or the verdict says it was
// replaced (in a new file of the judge's). Any failure ends the judge with a status other than 0, and the
// engine believes no result of a job that did not exit 0.
class ResultFile {
 public:
  bool create(const std::string& path) {
    path_ = path;
    unlink(path.c_str());
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd_ >= 0 && fstat(fd_, &st_) == 0;
  }
  // "" once written, else why not.
  std::string write(const std::string& text) {
    if (fd_ < 0) return "no result file";
    if (ftruncate(fd_, 0) != 0) return std::string("ftruncate: ") + strerror(errno);
    for (size_t at = 0; at < text.size();) {
      ssize_t n = pwrite(fd_, text.data() + at, text.size() - at, (off_t)at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::string("write: ") + strerror(n < 0 ? errno : ENOSPC);
      at += (size_t)n;
    }
    if (fsync(fd_) != 0) return std::string("fsync: ") + strerror(errno);
    return "";
  }
  bool replaced() const {
    struct stat now;
    return stat(path_.c_str(), &now) != 0 || now.st_dev != st_.st_dev || now.st_ino != st_.st_ino;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  struct stat st_ {};
};
ResultFile g_result;

std::string failed_result(const std::string& mode, const std::string& error);

// Writes the verdict; returns the judge's exit status (0 only when it is in place, unreplaced).
int write_verdict(const std::string& text, int status) {
  std::string why = g_result.write(text);
  if (why.empty() && g_result.replaced()) {
    ResultFile again;
    if (!again.create(g_result.path())) why = "cannot create it again: " + std::string(strerror(errno));
    else why = again.write(failed_result(g_mode, "result.json was replaced while the job ran (the candidate wrote the "
                                                 "job's directory): the harness's verdict was not where the engine reads it"));
    if (why.empty()) return 3;
  }
  if (!why.empty()) {
    fprintf(stderr, "harness: cannot write %s: %s\n", g_result.path().c_str(), why.c_str());
    return 5;
  }
  return status;
}

std::string failed_result(const std::string& mode, const std::string& error) {
  return "{\"harness\": \"cuco-cpu/1\", \"mode\": " + quote(mode) + ", \"correct\": false, \"error\": " +
         quote(error) + ", \"configs\": [], \"nonce\": " + quote(g_nonce) + "}\n";
}

void kill_rank_processes();

[[noreturn]] void die_with_result(const std::string& mode, const std::string& error) {
  kill_rank_processes();
  const int status = write_verdict(failed_result(mode, error), 3);
  fflush(stdout);
  _exit(status);
}

int64_t ns_of(Clock::time_point t) { return t.time_since_epoch().count(); }

// A message a ranks' process left for the judge: candidate-writable memory, so cut and made printable.
std::string printable(const char* s, size_t cap) {
  std::string o;
  for (size_t i = 0; i < cap && s[i]; ++i) o += (s[i] >= 32 && s[i] < 127) ? s[i] : '?';
  return o;
}

// The link: one copy engine per source rank, modelled by the judge, one link per ranks' process (each
// serves its own region). A put reaches the judge as a datagram on a socket of its own (the put's fields,
// fixed when it was sent), and is queued at the moment the kernel stamped it when it was sent
// (SO_TIMESTAMPNS): a time the candidate cannot move back (a time it wrote would let it date a put made
// after its compute back to the call's start, and overlap for free), and one the judge's link thread need
// not be running at (on two busy cores it waits for one). Every limit a put is checked against (the
// geometry, the data area's size) is the judge's own, never a field of the shared region. Transfers of one
// rank queue behind each other. Its bytes land progressively, as a
// DMA engine's do: in row blocks of about kLandBytes, each at the time the link has carried it, copied by
// the judge from the source in the shared region into the destination rank's `out`; the put's flag
// counter rises with its last block. The link thread sleeps between landings; the ranks wait on the
// counters (futexes in the shared region).
constexpr size_t kLandBytes = 64 * 1024;
class Link {
 public:
  // `sock`: the judge's end of the ranks' process's put socket (the link owns it).
  Link(Region* sh, int64_t data_floats, int sock)
      : sh_(sh), data_floats_(data_floats), sock_(sock), thread_([this] { loop(); }) {}
  ~Link() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_ = true;
    }
    shutdown(sock_, SHUT_RDWR);   // wakes its poll at once
    thread_.join();
    close(sock_);
  }
  // A config's geometry and link speed, and where the ranks' outputs are (the ranks' processes are stopped).
  void configure(int R, int M, int N, double gbps, std::vector<float*> outs) {
    std::lock_guard<std::mutex> g(mu_);
    R_ = R; M_ = M; N_ = N; ld_ = R * N; bytes_per_s_ = gbps * 1e9; outs_ = std::move(outs);
  }
  // Before every call (the ranks' processes are stopped): an empty link, counters at zero.
  void begin_call(bool record) {
    std::lock_guard<std::mutex> g(mu_);
    call_t0_ = Clock::time_point::max();   // no put is taken before started()
    pending_.clear();
    landed_.clear();
    puts_.clear();
    bad_.clear();
    record_ = record;
    free_at_.assign(R_, Clock::time_point());
    for (int r = 0; r < R_; ++r) {
      for (auto& c : sh_->counters[r]) c.store(0, std::memory_order_relaxed);
      sh_->posted[r].store(0);
      sh_->landed[r].store(0);
    }
    // The kernel stamps a datagram by the real-time clock; the judge's is monotonic
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    real_minus_judge_ns_ = (int64_t)rt.tv_sec * 1000000000LL + rt.tv_nsec - ns_of(Clock::now());
    active_ = true;
  }
  // The call's start (the judge's clock, taken just before the ranks' process is let run).
  void started(Clock::time_point t0) {
    std::lock_guard<std::mutex> g(mu_);
    call_t0_ = t0;
  }
  // The end of a call (the ranks' process is stopped): every put taken, and what is queued lands
  // (sleeping until the last landing time).
  void drain() {
    Clock::time_point last = Clock::now();
    {
      std::lock_guard<std::mutex> g(mu_);
      intake(Clock::now());
      for (auto& it : pending_) last = std::max(last, it.land_at);
    }
    std::this_thread::sleep_until(last);
    std::lock_guard<std::mutex> g(mu_);
    deliver_due(Clock::time_point::max());
    active_ = false;
  }
  // A put the link could not carry (out of bounds, or naming a rank that does not exist), or "".
  std::string bad_put() {
    std::lock_guard<std::mutex> g(mu_);
    return bad_;
  }
  // Every element of every rank's peer tiles that holds a value must have landed through the link during
  // the call: ranks are threads of one process, so a rank can read a peer's tile straight out of the
  // peer's memory (a pointer left in a static) instead of paying the link for it. Empty when it did,
  // else the first element that did not, for the call's error.
  std::string undelivered_peer_tiles() {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<unsigned char>& got = delivered_;   // kept between calls: no map and unmap per call
    got.resize((size_t)M_ * ld_);
    for (int d = 0; d < R_; ++d) {
      std::fill(got.begin(), got.end(), 0);
      for (const auto& l : landed_)
        if (l.dst == d)
          for (int i = l.row; i < l.row + l.rows && i < M_; ++i) memset(&got[(size_t)i * ld_ + l.col], 1, l.cols);
      for (int q = 0; q < R_; ++q) {
        if (q == d) continue;
        for (int i = 0; i < M_; ++i)
          for (int j = q * N_; j < (q + 1) * N_; ++j)
            // Still poisoned: nothing wrote it, which verification reports as a wrong value.
            if (!got[(size_t)i * ld_ + j] && !std::isnan(outs_[d][(size_t)i * ld_ + j]))
              return "rank " + std::to_string(d) + "'s copy of rank " + std::to_string(q) + "'s tile (row " +
                     std::to_string(i) + ", column " + std::to_string(j) + ") did not arrive through the link: a peer's "
                     "tile reaches a rank only by put";
      }
    }
    return "";
  }
  struct PutRecord { int from, dst; Clock::time_point queued, carried, landed; long bytes; bool helper; };
  std::vector<PutRecord> put_records() {
    std::lock_guard<std::mutex> g(mu_);
    return puts_;
  }

 private:
  struct Item {
    int dst, row, col, rows, cols, flag, from;   // flag -1: not the put's last block
    int64_t src_off;   // read when it lands, like a DMA engine
    int src_ld;
    bool last;
    Clock::time_point land_at;
  };
  struct Landed { int dst, row, col, rows, cols; };

  static constexpr int kIdlePoll = 20;   // ms: how long the link sleeps with nothing to land

  void loop() {
    prctl(PR_SET_TIMERSLACK, 1UL);   // landings on time, not 50 us late
    std::unique_lock<std::mutex> lk(mu_);
    while (!quit_) {
      Clock::time_point next = Clock::time_point::max();
      if (active_) {
        auto now = Clock::now();
        intake(now);
        deliver_due(now);
        for (auto& it : pending_) next = std::min(next, it.land_at);
      }
      lk.unlock();
      // until a put arrives or the next landing is due
      int64_t wait_ns = next == Clock::time_point::max() ? (int64_t)kIdlePoll * 1000000 : ns_of(next) - ns_of(Clock::now());
      if (wait_ns > 0) {
        struct pollfd pfd = {sock_, POLLIN, 0};
        struct timespec ts = ns_timespec(wait_ns);
        ppoll(&pfd, 1, &ts, nullptr);
      }
      lk.lock();
    }
  }
  // Take the puts the ranks' process has sent (in order; each checked: its fields are the candidate's).
  void intake(Clock::time_point now) {
    for (;;) {
      PutReq q;
      char control[CMSG_SPACE(sizeof(struct timespec))];
      struct iovec io = {&q, sizeof q};
      struct msghdr msg;
      memset(&msg, 0, sizeof msg);
      msg.msg_iov = &io;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = recvmsg(sock_, &msg, MSG_DONTWAIT);
      if (n < 0) return;   // nothing more (EAGAIN), or the ranks' process is gone
      int64_t sent_ns = INT64_MIN;
      for (struct cmsghdr* h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_TIMESTAMPNS) {
          struct timespec ts;
          memcpy(&ts, CMSG_DATA(h), sizeof ts);
          sent_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec - real_minus_judge_ns_;
        }
      // a put is taken from the call's start on; without the kernel's stamp, when the link reads it
      const auto sent = sent_ns == INT64_MIN ? now : Clock::time_point(Clock::duration(sent_ns));
      const auto queued = std::min(now, std::max(call_t0_, sent));
      if (n != (ssize_t)sizeof q) {
        if (bad_.empty()) bad_ = "the link was handed something that is not a put: its socket was written around the put call";
        continue;
      }
      const int from = q.from, dst = q.dst, row = q.row, col = q.col, rows = q.rows, cols = q.cols;
      const int src_ld = q.src_ld, flag = q.flag;
      const bool helper = q.helper != 0;
      const int64_t off = q.src_off;
      if (!put_fits(from, dst, row, col, rows, cols, src_ld, flag, off)) {
        if (bad_.empty()) bad_ = "the link was handed a put it cannot carry (rank " + std::to_string(from) + " to " +
                                 std::to_string(dst) + ", " + std::to_string(rows) + " x " + std::to_string(cols) +
                                 " at row " + std::to_string(row) + ", column " + std::to_string(col) +
                                 "): its socket was written around the put call";
        continue;
      }
      const size_t row_bytes = (size_t)cols * sizeof(float);
      const int block = row_bytes ? (int)std::max<size_t>(1, kLandBytes / row_bytes) : 1;
      const auto free_before = free_at_[from];
      auto at = std::max(queued, free_before);
      int r0 = 0;
      do {   // at least once: an empty put still raises its flag
        const int n = std::min(block, rows - r0);
        at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>((double)n * row_bytes / bytes_per_s_));
        const bool is_last = r0 + block >= rows;
        pending_.push_back(Item{dst, row + r0, col, n, cols, is_last ? flag : -1, from, off + (int64_t)r0 * src_ld,
                                src_ld, is_last, at});
        r0 += block;
      } while (r0 < rows);
      free_at_[from] = at;
      if (record_ && puts_.size() < 20000)
        puts_.push_back(PutRecord{from, dst, queued, std::max(queued, free_before), at, (long)rows * cols * (long)sizeof(float), helper});
    }
  }
  // Every bound in 64-bit arithmetic on values already known to be small: no sum of the candidate's
  // numbers can wrap round and pass.
  bool put_fits(int from, int dst, int row, int col, int rows, int cols, int src_ld, int flag, int64_t off) const {
    if (from < 0 || from >= R_ || dst < 0 || dst >= R_ || flag < 0 || flag >= CUCO_FLAGS) return false;
    if (rows < 0 || cols < 0 || row < 0 || col < 0 || src_ld < cols || src_ld < 0 || off < 0) return false;
    if ((int64_t)col + cols > ld_ || (int64_t)row + rows > M_ || off > data_floats_) return false;
    const int64_t last = rows ? off + (int64_t)(rows - 1) * src_ld + cols : off;   // each term < 2^62
    return last <= data_floats_;
  }
  void deliver_due(Clock::time_point now) {
    auto keep = std::partition(pending_.begin(), pending_.end(), [&](const Item& it) { return it.land_at > now; });
    if (keep == pending_.end()) return;
    std::vector<Item> due(std::make_move_iterator(keep), std::make_move_iterator(pending_.end()));
    pending_.erase(keep, pending_.end());
    // A rank's transfers land in the order it issued them (its link is a queue).
    std::stable_sort(due.begin(), due.end(), [](const Item& a, const Item& b) { return a.land_at < b.land_at; });
    const float* base = data(sh_);
    for (auto& it : due) {
      float* dst = outs_[it.dst];
      for (int i = 0; i < it.rows; ++i)
        memcpy(dst + (size_t)(it.row + i) * ld_ + it.col, base + it.src_off + (int64_t)i * it.src_ld, sizeof(float) * it.cols);
      landed_.push_back(Landed{it.dst, it.row, it.col, it.rows, it.cols});
      if (it.flag >= 0) {
        sh_->counters[it.dst][it.flag].fetch_add(1, std::memory_order_release);
        futex_wake(&sh_->counters[it.dst][it.flag]);
      }
      if (it.last) {
        sh_->landed[it.from].fetch_add(1, std::memory_order_release);
        futex_wake(&sh_->landed[it.from]);
      }
    }
  }

  Region* sh_;
  const int64_t data_floats_;   // the data area's size, the judge's
  const int sock_;              // puts arrive here, stamped by the kernel when sent
  int64_t real_minus_judge_ns_ = 0;
  int R_ = 0, M_ = 0, N_ = 0, ld_ = 0;
  double bytes_per_s_ = 1e9;
  std::vector<float*> outs_;
  std::vector<Clock::time_point> free_at_;
  std::vector<Item> pending_;
  std::vector<Landed> landed_;             // since begin_call
  std::vector<PutRecord> puts_;            // the profiled call's
  std::vector<unsigned char> delivered_;   // undelivered_peer_tiles' map of one rank's out
  std::string bad_;
  Clock::time_point call_t0_;
  bool active_ = false, record_ = false, quit_ = false;
  std::mutex mu_;
  std::thread thread_;   // last: it starts once everything above is built
};

// Run as root outside a sandbox that drops them (bwrap does), a ranks' process would keep every
// capability, CAP_SYS_PTRACE among them: enough to open the judge's /proc/PID/mem although the judge is
// not dumpable. It gives them all up, for good (no root privileges again at exec).
void drop_capabilities() {
  if (geteuid() != 0) return;
  prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                               SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED);
  for (int cap = 0; cap <= 63; ++cap) prctl(PR_CAPBSET_DROP, cap);
  struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct none[2] = {};
  syscall(SYS_capset, &head, none);
}

// A process that runs the ranks (ranks.cpp), as the judge sees it: started from a fresh image of this
// executable, stopped except while one of its calls is timed, its threads counted by the kernel.
class RankProcess {
 public:
  // `fd`: its region; `sock`: its end of the put socket; `uid`: the uid it runs under (0: the judge's own).
  RankProcess(const char* role, int fd, int sock, Region* sh, uid_t uid = 0) : role_(role), sh_(sh) {
    sh_->ready.store(0);
    pid_ = fork();
    if (pid_ < 0) die_with_result(g_mode, std::string("cannot start the ranks' process: ") + strerror(errno));
    if (pid_ == 0) {
      int devnull = open("/dev/null", O_RDONLY);   // the nonce came on stdin: not for the ranks
      if (devnull >= 0) dup2(devnull, 0);
      // Its region and its put socket survive the exec, as descriptors 10 and 11 in both ranks' processes (one
      // layout: arguments of one length); every other descriptor of the judge's does not.
      const int region = fcntl(fd, F_DUPFD_CLOEXEC, 20), put = fcntl(sock, F_DUPFD_CLOEXEC, 20);
      if (region < 0 || put < 0 || dup2(region, 10) != 10 || dup2(put, 11) != 11) _exit(126);
      if (uid != 0) {   // no group of root's, then the uid (which clears every capability)
        if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
          fprintf(stderr, "harness: the candidate's ranks keep the judge's uid: %s\n", strerror(errno));
      }
      drop_capabilities();
      // The same address layout in both ranks' processes (no randomization, and arguments of the same
      // length): with layouts of their own, where the process's stacks and mappings fell made the seed
      // measure 0.75x-1.16x against its own copy (the same code, the same shared buffers).
      personality(ADDR_NO_RANDOMIZE);
      execl("/proc/self/exe", "cuco-ranks", "--ranks", role, "10", "11", (char*)nullptr);
      _exit(127);
    }
    // Ready: its threads started and its filter installed. Then it is stopped until its first call.
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (sh_->ready.load() == 0) {
      struct timespec ts = ns_timespec(50000000);
      futex_wait(&sh_->ready, 0, &ts);
      ended_or_die();
      if (Clock::now() > deadline) die_with_result(g_mode, std::string("the ") + role + " ranks' process did not start");
    }
    stop();
    base_threads_ = threads();
    struct stat st;
    uid_ = stat(("/proc/" + std::to_string(pid_)).c_str(), &st) == 0 ? (long)st.st_uid : -1;
    started_ = true;
  }
  long uid() const { return uid_; }   // as the kernel shows it (its /proc directory's owner)
  pid_t pid() const { return pid_; }
  Region* region() const { return sh_; }   // its own: the other process never maps it
  Link* link = nullptr;                     // the link that serves its region
  void cont() { kill(pid_, SIGCONT); }
  // SIGSTOP and wait until every thread of it has stopped.
  void stop() {
    kill(pid_, SIGSTOP);
    for (;;) {
      int st = 0;
      pid_t got = waitpid(pid_, &st, WUNTRACED);
      if (got == pid_ && WIFSTOPPED(st)) return;
      if (got == pid_) ended(st);
      if (got < 0 && errno != EINTR) die_with_result(g_mode, std::string("lost the ranks' process: ") + strerror(errno));
    }
  }
  // Returns if it is still running; ends the judge's job with the process's fate if it has ended.
  void ended_or_die() {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_ && !WIFSTOPPED(st) && !WIFCONTINUED(st)) ended(st);
  }
  int threads() const {   // counted by the kernel, not by anything the candidate can write
    int n = 0;
    std::string dir = "/proc/" + std::to_string(pid_) + "/task";
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) if (e->d_name[0] != '.') ++n;
      closedir(d);
    }
    return n;
  }
  int base_threads() const { return base_threads_; }
  // After the last call: let it end on its own (what it printed reaches the log), for at most 2 s.
  void finish() {
    if (pid_ <= 0) return;
    cont();
    auto deadline = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < deadline) {
      int st = 0;
      pid_t got = waitpid(pid_, &st, WNOHANG);
      if (got == pid_ && (WIFEXITED(st) || WIFSIGNALED(st))) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kill_now();
  }
  void kill_now() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  // The process ended on its own. The candidate's, killed by a signal (a crash, or SIGKILL: its own or the
  // host's OOM killer choosing it): the judge says so in its verdict, and the job's exit status is the
  // judge's, never a signal a candidate can choose for it (the engine would take a SIGKILL for the host's
  // fault). The baseline's, killed: the judge ends the same way (not the candidate's doing). Else the reason
  // it left (a refused system call, a deadlock), or an exit the candidate called.
  [[noreturn]] void ended(int st) {
    pid_ = -1;
    if (WIFSIGNALED(st) && !strcmp(role_, "cand"))
      die_with_result(g_mode, std::string("the candidate's ranks' process was killed by signal ") +
                                  std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")");
    if (WIFSIGNALED(st)) {
      kill_rank_processes();
      fflush(stdout);
      signal(WTERMSIG(st), SIG_DFL);
      raise(WTERMSIG(st));
      _exit(128 + WTERMSIG(st));
    }
    std::string why = printable(sh_->error, sizeof sh_->error);
    if (!started_ && why.empty())
      why = std::string("the ") + role_ + " ranks' process did not start (exit status " +
            std::to_string(WEXITSTATUS(st)) + "; is /proc mounted?)";
    else if (WEXITSTATUS(st) != 3 || why.empty())
      why = "the process exited before the harness finished (exit() called by the candidate?)";
    die_with_result(g_mode, why);
  }
  const char* role_;
  Region* sh_;
  pid_t pid_ = -1;
  int base_threads_ = 0;
  long uid_ = -1;
  bool started_ = false;
};

RankProcess* g_procs[2] = {nullptr, nullptr};   // for die_with_result: no ranks' process outlives the verdict
void kill_rank_processes() {
  for (auto* p : g_procs) if (p) p->kill_now();
}

struct Mismatch {
  int rank = -1;
  long index = -1;
  double expected = 0, got = 0;
  std::string what;
};

// Where one ranks' process sees a config's buffers: in its own region.
struct View {
  float* A = nullptr;
  std::vector<float*> B, out, scratch;
};

// Random bits from the kernel, drawn when asked (after the call they check): nothing in any process's
// memory (a generator's state) predicts them.
void kernel_random(uint64_t* words, size_t n) {
  size_t got = 0;
  while (got < n * sizeof(uint64_t)) {
    ssize_t k = getrandom(reinterpret_cast<char*>(words) + got, n * sizeof(uint64_t) - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die_with_result(g_mode, std::string("getrandom failed: ") + strerror(errno));
    got += (size_t)k;
  }
}

// One config's buffers: the inputs, outputs and scratch in each ranks' process's region (its view), the
// pristine copies of the inputs and the reference in the judge's own memory (nobody else's).
struct Buffers {
  int R, M, N, K;
  View cand, base;
  std::vector<float> A_copy;
  std::vector<std::vector<float>> B_copy;
  std::vector<double> ref;       // fp64 reference, rank-major: ref[r][i*N+j]
  std::vector<double> refscale;  // sum |a||b| per element, for the relative tolerance

  // Lays the config out in both regions (the ranks' processes are stopped).
  Buffers(Region* csh, Region* bsh, int R_, int M_, int N_, int K_)
      : R(R_), M(M_), N(N_), K(K_), cand(lay_out(csh)), base(lay_out(bsh)) {
    A_copy.resize((size_t)M * K);
    B_copy.assign(R, std::vector<float>((size_t)K * N));
  }
  View lay_out(Region* sh) const {
    const int64_t m = M, n = N, k = K, r = R;
    sh->R = R; sh->M = M; sh->N = N; sh->K = K;
    sh->off_A = 0;
    sh->off_B = m * k;
    sh->off_out = sh->off_B + r * k * n;
    sh->off_scratch = sh->off_out + r * m * r * n;
    float* d = data(sh);
    View v;
    v.A = d;
    for (int p = 0; p < R; ++p) {
      v.B.push_back(d + m * k + p * k * n);
      v.out.push_back(d + m * k + r * k * n + p * m * r * n);
      v.scratch.push_back(d + m * k + r * k * n + r * m * r * n + p * m * n);
    }
    return v;
  }
  static int64_t floats(int R, int M, int N, int K) {
    const int64_t m = M, n = N, k = K, r = R;
    return m * k + r * k * n + r * m * r * n + r * m * n;
  }

  // New inputs, in the judge's memory; they reach a region in load(), right before a call there.
  void fill(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& x : A_copy) x = u(rng);
    for (auto& b : B_copy) for (auto& x : b) x = u(rng);
  }

  // Before every call in a region: the current inputs written there, every output poisoned with a NaN
  // pattern and scratch cleared, by this thread (both sides start from the same cache state), so nothing
  // from an earlier call (the reference's answer included) is left where the candidate could read it.
  void load(View& v) {
    memcpy(v.A, A_copy.data(), A_copy.size() * sizeof(float));
    for (int p = 0; p < R; ++p) memcpy(v.B[p], B_copy[p].data(), B_copy[p].size() * sizeof(float));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (float* o : v.out) std::fill(o, o + (size_t)M * R * N, nan);
    for (float* s : v.scratch) std::fill(s, s + (size_t)M * N, nan);
  }

  // The fp64 reference of the current inputs, made AFTER the candidate's call (from the pristine copies)
  // and dropped once used: during a call no reference of that call's inputs exists, so a candidate
  // cannot compare the reference with its inputs to tell a fully checked call from another.
  void forget_reference() {
    std::vector<double>().swap(ref);
    std::vector<double>().swap(refscale);
  }
  void make_reference() {
    ref.assign((size_t)R * M * N, 0.0);
    refscale.assign((size_t)R * M * N, 0.0);
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < M; ++i)
        for (int k = 0; k < K; ++k) {
          double a = A_copy[(size_t)i * K + k];
          const float* brow = &B_copy[r][(size_t)k * N];
          double* dst = &ref[((size_t)r * M + i) * N];
          double* sc = &refscale[((size_t)r * M + i) * N];
          for (int j = 0; j < N; ++j) { dst[j] += a * brow[j]; sc[j] += std::fabs(a * brow[j]); }
        }
  }

  bool inputs_unchanged(const View& v) const {
    if (memcmp(v.A, A_copy.data(), A_copy.size() * sizeof(float))) return false;
    for (int r = 0; r < R; ++r)
      if (memcmp(v.B[r], B_copy[r].data(), B_copy[r].size() * sizeof(float))) return false;
    return true;
  }

  // The check after EVERY candidate call (warm-up, timed, final, profiled alike), outside its timing:
  // each rank's own tile against a randomized product check (Freivalds: out_p x == A (B_p x) for a random
  // x drawn from the kernel after the call, row by row within the tolerance the element-wise check
  // allows, summed), and every copy of a tile bit-exact against its owner's. O(M N + M K + K N) per rank,
  // against the call's O(M N K): a call that skipped or faked any part of its work fails it, whichever
  // call it was. The same check follows every call of the baseline's.
  bool check_call(const View& v, double tol, Mismatch* m) {
    const int ld = R * N;
    x_.resize(N); bx_.resize(K); babs_.resize(K); bits_.resize(N);
    for (int p = 0; p < R; ++p) {
      kernel_random(bits_.data(), bits_.size());
      for (int j = 0; j < N; ++j)   // a sign and a magnitude in [0.5, 1.5)
        x_[j] = (bits_[j] & 1 ? 1.0 : -1.0) * (0.5 + (double)(bits_[j] >> 11) * 0x1p-53);
      const float* b = B_copy[p].data();
      for (int k = 0; k < K; ++k) {
        double s = 0, sa = 0;
        for (int j = 0; j < N; ++j) { s += (double)b[(size_t)k * N + j] * x_[j]; sa += std::fabs((double)b[(size_t)k * N + j] * x_[j]); }
        bx_[k] = s; babs_[k] = sa;
      }
      for (int i = 0; i < M; ++i) {
        const float* row = &v.out[p][(size_t)i * ld + (size_t)p * N];
        double y = 0;
        for (int j = 0; j < N; ++j) y += (double)row[j] * x_[j];
        double z = 0, bound = 0;
        const float* a = &A_copy[(size_t)i * K];
        for (int k = 0; k < K; ++k) { z += (double)a[k] * bx_[k]; bound += std::fabs((double)a[k]) * babs_[k]; }
        if (!(std::fabs(y - z) <= tol * bound * (1 + 1e-9) + 1e-30)) {   // NaN fails too
          long at = (long)i * ld + (long)p * N;
          for (int j = 0; j < N; ++j)   // name an element that is not finite, if there is one
            if (!std::isfinite(row[j])) { at += j; break; }
          *m = {p, at, z, y, "compute (row " + std::to_string(i) + "'s product check: x-weighted sums)"};
          return false;
        }
      }
    }
    return gather_exact(v, m);
  }

  // Tile p of rank q must equal, bit for bit, tile p of rank p (the owner's copy).
  static bool gather_exact(const View& v, int R, int M, int N, Mismatch* m) {
    const auto& out = v.out;
    for (int q = 0; q < R; ++q)
      for (int p = 0; p < R; ++p)
        if (p != q)
          for (int i = 0; i < M; ++i) {
            size_t at = (size_t)i * R * N + (size_t)p * N;
            if (memcmp(&out[q][at], &out[p][at], sizeof(float) * N)) {
              for (int j = 0; j < N; ++j)
                if (memcmp(&out[q][at + j], &out[p][at + j], sizeof(float))) {
                  *m = {q, (long)(at + j), out[p][at + j], out[q][at + j], "gather"};
                  return false;
                }
            }
          }
    return true;
  }

  // Every rank's output element by element: the owner's tile against the fp64 reference (made now, for
  // the inputs of the call just made, and dropped again), and every copy bit-exact.
  bool verify(double tol, Mismatch* m) {
    make_reference();
    bool ok = verify_against_reference(cand, tol, m);
    forget_reference();
    return ok;
  }

 private:
  std::vector<double> x_, bx_, babs_;   // check_call's vectors, kept between calls
  std::vector<uint64_t> bits_;
  bool gather_exact(const View& v, Mismatch* m) const { return gather_exact(v, R, M, N, m); }

 public:
  bool verify_against_reference(const View& v, double tol, Mismatch* m) const {
    const auto& out = v.out;
    for (int p = 0; p < R; ++p)
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          size_t at = (size_t)i * R * N + (size_t)p * N + j;
          float own = out[p][at];
          double want = ref[((size_t)p * M + i) * N + j];
          double scale = refscale[((size_t)p * M + i) * N + j];
          if (!std::isfinite(own) || std::fabs(own - want) > tol * scale + 1e-30) {
            *m = {p, (long)at, want, own, "compute"};
            return false;
          }
        }
    return gather_exact(v, m);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double spread(std::vector<double> v) {  // interquartile range relative to the median
  std::sort(v.begin(), v.end());
  double med = median(v);
  if (v.size() < 4 || med <= 0) return 0;
  return (v[(3 * v.size()) / 4] - v[v.size() / 4]) / med;
}

// The 95 % interval of the median of per-round ratios, by order statistics: no assumption on the noise's
// shape, and a burst that hits a few rounds moves neither end much. [x(k), x(n+1-k)] for the largest k whose
// binomial tail P(Bin(n, 1/2) < k) stays within 2.5 %; below 6 rounds no k does, and it is the whole range.
void ratio_interval(std::vector<double> v, double* lo, double* hi) {
  std::sort(v.begin(), v.end());
  const int n = (int)v.size();
  if (n == 0) { *lo = *hi = 0; return; }
  double cdf = 0, term = std::pow(0.5, n);   // term: P(Bin(n, 1/2) = j)
  int k = 0;
  for (int j = 0; j < n; ++j) {
    cdf += term;
    if (cdf > 0.025) break;
    k = j + 1;
    term = term * (n - j) / (j + 1);
  }
  *lo = v[std::max(0, k - 1)];
  *hi = v[n - std::max(1, k)];
}

struct ConfigResult {
  std::string name, error;
  bool correct = false;
  Mismatch mismatch;
  bool timed = false;
  double base_ms = 0, cand_ms = 0, base_spread = 0, cand_spread = 0, comp_ms = 0, comm_ms = 0;
  double speedup = 0;  // the median of per-round ratios (A B taken back to back): robust to load drift
  double speedup_lo = 0, speedup_hi = 0;   // its 95 % interval (ratio_interval)
  std::vector<double> round_base, round_cand;   // the raw rounds, in the order they ran
  std::vector<int> round_cand_first;
  std::string timeline;   // the profiled call's records (JSON), or empty
};

const char* const kForeignPut = "a put named another rank's link as its source: each rank puts only on its own link "
                                "(p->rank)";

// Where the time goes: ONE untimed call per config, after the timed loop, is recorded (never a timed one):
// each put as the judge's link carried it (taken, carried from, landed), and each wait, quiet and barrier
// as the ranks' process saw it (entered, left; the same CLOCK_MONOTONIC), per rank. Compute is the rank's
// time outside them (engine/timeline/timeline.py). It informs; nothing in it decides a verdict.
std::string timeline_json(Region* sh, int R, Clock::time_point t0, Clock::time_point end,
                          const std::vector<Link::PutRecord>& puts) {
  const int64_t z = ns_of(t0);
  auto us = [z](int64_t ns) { return (double)(ns - z) / 1000.0; };
  const uint32_t n = std::min<uint32_t>(sh->n_events.load(), kEvents);
  long dropped = (long)sh->n_events.load() - (long)n + (puts.size() >= 20000 ? 1 : 0);
  std::string o = "{\"source\": \"cpu-link\", \"unit\": \"us\", \"end\": " + num(us(ns_of(end))) + ", \"dropped\": " +
                  std::to_string(std::max(0L, dropped)) + ", \"ranks\": [";
  for (int r = 0; r < R; ++r)
    o += std::string(r ? ", " : "") + "{\"rank\": " + std::to_string(r) + ", \"start\": " + num(us(sh->start_ns[r])) +
         ", \"return\": " + num(us(sh->return_ns[r])) + "}";
  o += "], \"events\": [";
  bool first = true;
  for (const auto& p : puts) {
    o += std::string(first ? "" : ", ") + "{\"k\": \"put\", \"rank\": " + std::to_string(p.from) + ", \"t0\": " +
         num(us(ns_of(p.queued))) + ", \"t1\": " + num(us(ns_of(p.landed))) + ", \"helper\": " +
         (p.helper ? "true" : "false") + ", \"dst\": " + std::to_string(p.dst) + ", \"carried\": " +
         num(us(ns_of(p.carried))) + ", \"bytes\": " + std::to_string(p.bytes) + "}";
    first = false;
  }
  static const char* const kinds[] = {"", "wait", "quiet", "barrier"};
  for (uint32_t i = 0; i < n; ++i) {
    const Event e = sh->events[i];
    if (e.kind < kWait || e.kind > kBarrier || e.rank < 0 || e.rank >= R) continue;   // the candidate's memory
    o += std::string(first ? "" : ", ") + "{\"k\": \"" + kinds[e.kind] + "\", \"rank\": " + std::to_string(e.rank) +
         ", \"t0\": " + num(us(e.t0_ns)) + ", \"t1\": " + num(us(e.t1_ns)) + ", \"helper\": " +
         (e.helper ? "true" : "false") + "}";
    first = false;
  }
  return o + "]}";
}

struct Runner {
  int R;   // the judge's, as is every other number it times or checks a call by
  RankProcess& cand;
  RankProcess& base;
  double tol;
  std::mt19937_64 check_rng{std::random_device{}()};   // the warm-up count (the checks draw from the kernel)
  double check_ms = 0;   // the time every call's checks took (untimed; reported as check_ms)
  double timed_ms = 0;   // every call's time added up: the launcher checks that it fits in the job's wall time

  // One command on every rank of `proc`, timed by the judge: from letting the process run to having it
  // stopped again with every transfer landed. Fills *error when the call failed.
  double timed(RankProcess& proc, int cmd, std::string* error, bool record = false,
               Clock::time_point* started = nullptr, Clock::time_point* ended = nullptr) {
    Region* sh = proc.region();
    Link& link = *proc.link;
    link.begin_call(record);
    sh->cmd = cmd;
    sh->done.store(0);
    for (int r = 0; r < R; ++r) sh->rc[r] = 0;
    sh->foreign_put.store(0);
    sh->n_events.store(0);
    sh->cmd_seq.fetch_add(1);
    const auto t0 = Clock::now();
    link.started(t0);
    proc.cont();
    futex_wake(&sh->cmd_seq);
    for (;;) {   // until every rank has returned (a count the candidate could forge: see the stop below)
      const uint32_t v = sh->done.load();
      if ((int)v >= R) break;
      struct timespec ts = ns_timespec(50000000);
      futex_wait(&sh->done, v, &ts);
      proc.ended_or_die();
    }
    // Threads the call started must be gone; if they are not yet, the call lasts until they are.
    bool leaked = false;
    if (proc.threads() > proc.base_threads()) {
      auto deadline = Clock::now() + std::chrono::seconds(2);
      while (proc.threads() > proc.base_threads()) {
        if (Clock::now() > deadline) {
          leaked = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    // Stopped before anything is read: whatever the process claimed, nothing of it runs while the judge
    // checks, and work it left for later is work it has not done.
    const int left = proc.threads() - proc.base_threads();
    proc.stop();
    link.drain();
    const auto t1 = Clock::now();
    if (started) *started = t0;
    if (ended) *ended = t1;
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    timed_ms += ms;
    int rc = 0;
    for (int r = 0; r < R; ++r) if (sh->rc[r] != 0) rc = sh->rc[r];
    std::string bad = link.bad_put();
    if (sh->foreign_put.load()) *error = kForeignPut;
    else if (!bad.empty()) *error = bad;
    else if (rc != 0) *error = "cuco_run returned " + std::to_string(rc);
    else if (leaked) *error = "cuco_run returned while " + std::to_string(left) + " thread(s) it started were still running 2 s later";
    return ms;
  }

  // The checks after a candidate call, the same for every call: inputs, the link's deliveries, the
  // product check and the gather. Timed apart (their cost is reported), never inside a call's time.
  bool checks(Buffers& b, ConfigResult* res) {
    auto t0 = Clock::now();
    bool ok = checks_untimed(b, res);
    check_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return ok;
  }
  bool checks_untimed(Buffers& b, ConfigResult* res) {
    if (!b.inputs_unchanged(b.cand)) { res->error = "the candidate modified its inputs (A or B)"; return false; }
    std::string missing = cand.link->undelivered_peer_tiles();
    if (!missing.empty()) { res->error = missing; return false; }
    return b.check_call(b.cand, tol, &res->mismatch);
  }
  // The element-wise verification against the fp64 reference (made after the call), counted with the checks.
  bool verify(Buffers& b, ConfigResult* res) {
    auto t0 = Clock::now();
    bool ok = b.verify(tol, &res->mismatch);
    check_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return ok;
  }

  // One candidate call with every check after it. Returns false (with res->error) on any failure.
  bool candidate_call(Buffers& b, ConfigResult* res, double* ms) {
    b.load(b.cand);
    std::string error;
    double t = timed(cand, kCandidate, &error);
    if (ms) *ms = t;
    if (!error.empty()) { res->error = error; return false; }
    return checks(b, res);
  }
  // The profiled call: untimed, after the timed loop, checked like every other; its records go to
  // res->timeline.
  bool profiled_call(Buffers& b, ConfigResult* res) {
    b.load(b.cand);
    std::string error;
    Clock::time_point t0, t1;
    timed(cand, kProfiled, &error, true, &t0, &t1);
    if (!error.empty()) {
      res->error = error == kForeignPut ? error : "the profiled call after the timed loop failed (" + error + ")";
      return false;
    }
    if (!checks(b, res)) return false;
    res->timeline = timeline_json(cand.region(), b.R, t0, t1, cand.link->put_records());
    return true;
  }
  // A baseline call, checked like a candidate's (untimed, not counted as check time): its inputs unchanged,
  // and a full call's output by the product check and the gather.
  double baseline_call(Buffers& b, int cmd) {
    b.load(b.base);
    std::string error;
    double t = timed(base, cmd, &error);
    if (!error.empty()) die_with_result(g_mode, "the frozen baseline failed (" + error + "): harness bug");
    Mismatch m;
    if (!b.inputs_unchanged(b.base) || (cmd == kBaseline && !b.check_call(b.base, tol, &m)))
      die_with_result(g_mode, "the frozen baseline's call failed its checks (" +
                                  (m.what.empty() ? std::string("its inputs changed") : m.what) + "): harness bug");
    return t;
  }
  // cuco_setup / cuco_teardown in the candidate's process (untimed: no timed call's inputs exist yet).
  bool untimed(int cmd) {
    std::string error;
    double keep = timed_ms;
    timed(cand, cmd, &error);
    timed_ms = keep;
    return error.empty();
  }
};

// The uid the candidate's ranks run under. Run by root (a node that runs jobs as root; the sandbox keeps
// CAP_SETUID, CAP_SETGID and CAP_KILL for this), a uid of their own, drawn per job, that owns nothing: they
// can then neither open any other process of the job (the judge, the baseline's, the job's shells) through
// /proc, nor signal one, nor write the job's directory (result.json included). Else the judge's (0 here),
// where the judge not being dumpable and the filter are what hold. The executable is made readable and
// executable for it (it execs /proc/self/exe).
uid_t candidate_uid() {
  if (geteuid() != 0) return 0;
  uint64_t r = 0;
  kernel_random(&r, 1);
  struct stat st;
  if (stat("/proc/self/exe", &st) == 0) chmod("/proc/self/exe", st.st_mode | 0055);
  return (uid_t)(0x60000000u + (uint32_t)(r % 0x10000000u));
}

// The put socket of one ranks' process: sv[0] the judge's link's (the kernel stamps every datagram when it
// was sent), sv[1] the ranks' process's. Room for a few hundred puts before a put waits.
void put_socket(int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0)
    die_with_result(g_mode, std::string("cannot create the link's socket: ") + strerror(errno));
  int on = 1, bytes = 8 << 20;
  if (setsockopt(sv[0], SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) != 0)
    die_with_result(g_mode, std::string("cannot stamp the link's socket: ") + strerror(errno));
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

// A region of shared memory for one ranks' process (its descriptor in *fd, for that process alone).
Region* make_region(int R, int64_t floats, int* fd) {
  const size_t bytes = data_offset() + (size_t)floats * sizeof(float);
  *fd = memfd_create("cuco-shared", MFD_CLOEXEC);
  if (*fd < 0 || ftruncate(*fd, (off_t)bytes) != 0)
    die_with_result(g_mode, std::string("cannot create the shared memory: ") + strerror(errno));
  void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  if (at == MAP_FAILED) die_with_result(g_mode, std::string("cannot map the shared memory: ") + strerror(errno));
  Region* sh = static_cast<Region*>(at);
  sh->R = R;
  sh->data_floats = floats;   // the ranks' process's own check; the judge keeps its own copy
  return sh;
}

std::string mismatch_json(const Mismatch& m, const std::string& config) {
  if (m.rank < 0) return "null";
  return "{\"rank\": " + std::to_string(m.rank) + ", \"config\": " + quote(config) + ", \"index\": " +
         std::to_string(m.index) + ", \"expected\": " + num(m.expected) + ", \"got\": " +
         (std::isnan(m.got) ? std::string("\"NaN\"") : num(m.got)) + ", \"what\": " + quote(m.what) + "}";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && !strcmp(argv[1], "--ranks")) return cuco_ranks_main(argv[2], atoi(argv[3]), atoi(argv[4]));
  cuco_clock::init();
  // Not dumpable: a ranks' process (same user) may not open this one's memory, environment or descriptors
  // through /proc, nor attach to it.
  prctl(PR_SET_DUMPABLE, 0);
  std::string spec_path, result_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!strcmp(argv[i], "--spec")) spec_path = argv[i + 1];
    if (!strcmp(argv[i], "--result")) result_path = argv[i + 1];
  }
  if (spec_path.empty() || result_path.empty()) {
    fprintf(stderr, "usage: %s --spec spec.json --result result.json\n", argv[0]);
    return 2;
  }
  if (!g_result.create(result_path)) {
    fprintf(stderr, "harness: cannot create %s: %s\n", result_path.c_str(), strerror(errno));
    return 5;
  }
  jsonmin::Value spec;
  try {
    std::ifstream f(spec_path);
    std::stringstream ss;
    ss << f.rdbuf();
    spec = jsonmin::Parser(ss.str()).parse();
  } catch (const std::exception& e) {
    die_with_result("unknown", e.what());
  }
  g_mode = spec.at("mode").str;
  std::string& nonce = g_nonce;
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--nonce-stdin")) {
      char buf[129] = "";
      size_t n = fread(buf, 1, sizeof buf - 1, stdin);
      nonce.assign(buf, n);
      // Nothing else of this process's keeps it: stdin (the nonce's file, unlinked) goes.
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      if (nonce.size() < 16) die_with_result(g_mode, "the job's nonce was missing from stdin (read by someone else?)");
    }
  const bool bench = g_mode == "benchmark";
  const uint64_t seed = (uint64_t)spec.number("seed", 1);
  const int R = (int)spec.number("ranks", 2);
  const int warmup = (int)spec.number("warmup", 2);
  const int iters = std::max(1, (int)spec.number("iters", 9));   // rounds at least
  // Rounds go on past `iters` until the ratio's 95 % interval is narrower than `target_width` (relative to
  // the median), or `max_iters` rounds have run: a quiet machine stops early, a busy one buys precision.
  const int max_iters = std::max(iters, (int)spec.number("max_iters", iters));
  const double target_width = spec.number("target_width", 0.0);
  const bool timeline = !spec.has("timeline") || spec.at("timeline").b;   // the profiled call (default on)
  double tol = 1e-4;
  if (spec.has("tolerances")) tol = spec.at("tolerances").number("fp32", tol);

  // An engine's job (it hands a nonce) loses its spec once read: the seed in it would let a candidate make
  // the timed calls' inputs, and their answers, ahead of time (in cuco_setup, untimed).
  if (!nonce.empty()) unlink(spec_path.c_str());

  if (R < 1 || R > kMaxRanks) die_with_result(g_mode, "ranks must be 1.." + std::to_string(kMaxRanks));

  // The shared region, sized for the largest config.
  int64_t most = 0;
  for (const auto& cfg : spec.at("configs").arr) {
    const auto& prm = cfg.at("params");
    most = std::max(most, Buffers::floats(R, (int)prm.number("M", 64), (int)prm.number("N", 64), (int)prm.number("K", 16)));
  }
  // A region for each ranks' process: the candidate's never maps the baseline's.
  int cfd = -1, bfd = -1, cput[2], bput[2];
  Region* csh = make_region(R, most, &cfd);
  Region* bsh = make_region(R, most, &bfd);
  put_socket(cput);
  put_socket(bput);
  Link clink(csh, most, cput[0]), blink(bsh, most, bput[0]);
  RankProcess cand("cand", cfd, cput[1], csh, candidate_uid());   // role names of one length: one layout
  g_procs[0] = &cand;
  cand.link = &clink;
  close(cfd);
  close(cput[1]);
  RankProcess base("base", bfd, bput[1], bsh);
  g_procs[1] = &base;
  base.link = &blink;
  close(bfd);
  close(bput[1]);
  Runner run{R, cand, base, tol};
  std::vector<ConfigResult> results;
  bool all_ok = true;

  for (const auto& cfg : spec.at("configs").arr) {
    ConfigResult res;
    res.name = cfg.at("name").str;
    const auto& prm = cfg.at("params");
    int M = (int)prm.number("M", 64), N = (int)prm.number("N", 64), K = (int)prm.number("K", 16);
    Buffers b(csh, bsh, R, M, N, K);
    clink.configure(R, M, N, prm.number("link_gbps", 1.0), b.cand.out);
    blink.configure(R, M, N, prm.number("link_gbps", 1.0), b.base.out);
    // Verification and timing use different inputs: a candidate cannot replay a cached answer.
    b.fill(seed * 1000003ULL + std::hash<std::string>{}(res.name) % 1000 + (bench ? 17 : 0));
    if (!run.untimed(kSetup)) {
      res.error = "cuco_setup failed";
    } else if (!bench) {
      // Candidate, then the reference, then the candidate again: no stale answer to find.
      res.correct = run.candidate_call(b, &res, nullptr) && run.verify(b, &res);
      if (res.correct) {
        run.baseline_call(b, kBaseline);
        res.correct = run.candidate_call(b, &res, nullptr) && run.verify(b, &res);
      }
    } else {
      bool ok = true;
      // A random number of warm-ups (as many as asked, or one more): timing begins at no fixed count.
      const int warmups = warmup + (int)(run.check_rng() % 2);
      for (int w = 0; w < warmups && ok; ++w) {
        run.baseline_call(b, kBaseline);
        ok = run.candidate_call(b, &res, nullptr);
      }
      std::vector<double> tb, tc, tcomp, tcomm, ratios;
      const uint64_t base_seed = seed * 7919ULL + std::hash<std::string>{}(res.name) % 1000;
      bool cand_first = false;
      for (int it = 0; it < max_iters && ok; ++it) {
        // Which side goes first is drawn at random for each pair of rounds, and the pair's second round takes
        // the other order: no pattern to fall into step with, and each side first in half the rounds
        // (whatever favours a position cancels out).
        cand_first = it % 2 == 0 ? (run.check_rng() & 1) != 0 : !cand_first;
        double ms = 0;
        for (int side = 0; side < 2 && ok; ++side) {
          // Fresh inputs before every timed call, written by this thread like the poisoned outputs:
          // both sides start from the same cache state, and a saved answer is worthless.
          b.fill(base_seed + 1000 + 2 * it + side);
          if ((side == 0) != cand_first) {
            tb.push_back(run.baseline_call(b, kBaseline));
          } else {
            ok = run.candidate_call(b, &res, &ms);
            tc.push_back(ms);
          }
        }
        if (ok) {
          ratios.push_back(tb.back() / std::max(1e-9, tc.back()));
          res.round_cand_first.push_back(cand_first ? 1 : 0);
        }
        // The overlap bound's parts, on every iteration: sampled among the A B pairs, under the same
        // conditions (a burst after the loop met a different machine on a shared box, and a bound off by 2x
        // flags honest candidates as beyond it). Every iteration, not every other: with 5 samples a busy
        // moment once put the median compute-only time above the whole baseline's; 4 more cost ~50 ms a job.
        if (ok) {
          b.fill(base_seed + 5000 + it);
          tcomp.push_back(run.baseline_call(b, kCompOnly));
          b.fill(base_seed + 6000 + it);
          tcomm.push_back(run.baseline_call(b, kCommOnly));
        }
        if (ok && it + 1 >= iters && it % 2 == 1) {   // whole pairs of rounds only: the orders stay balanced
          double lo = 0, hi = 0;
          ratio_interval(ratios, &lo, &hi);
          const double mid = median(ratios);
          if (mid > 0 && (hi - lo) / mid <= target_width) break;
        }
      }
      for (int it = (int)tcomp.size(); it < 3 && ok; ++it) {   // at least three samples of each
        b.fill(base_seed + 7000 + it);
        tcomp.push_back(run.baseline_call(b, kCompOnly));
        b.fill(base_seed + 8000 + it);
        tcomm.push_back(run.baseline_call(b, kCommOnly));
      }
      // After the timed loop: new inputs again, one more candidate call, every rank verified.
      if (ok) b.fill(base_seed + 999999);
      ok = ok && run.candidate_call(b, &res, nullptr) && run.verify(b, &res);
      if (ok && timeline) ok = run.profiled_call(b, &res) && run.verify(b, &res);
      res.correct = ok;
      if (ok) {
        res.timed = true;
        res.base_ms = median(tb); res.cand_ms = median(tc);
        res.base_spread = spread(tb); res.cand_spread = spread(tc);
        res.comp_ms = median(tcomp); res.comm_ms = median(tcomm);
        res.speedup = median(ratios);
        ratio_interval(ratios, &res.speedup_lo, &res.speedup_hi);
        res.round_base = tb; res.round_cand = tc;
      }
    }
    if (!res.correct && res.error.empty() && res.mismatch.rank >= 0)
      res.error = "wrong " + res.mismatch.what + " result on rank " + std::to_string(res.mismatch.rank) +
                  " at index " + std::to_string(res.mismatch.index);
    run.untimed(kTeardown);
    all_ok = all_ok && res.correct;
    results.push_back(res);
    if (!res.correct) break;  // the verdict is in; spare the remaining configs
  }

  std::string o = "{\"harness\": \"cuco-cpu/1\", \"mode\": " + quote(g_mode) + ", \"correct\": " +
                  (all_ok ? "true" : "false") + ", \"error\": null, \"configs\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    o += std::string(i ? ", " : "") + "{\"name\": " + quote(r.name) + ", \"correct\": " +
         (r.correct ? "true" : "false") + ", \"error\": " + (r.error.empty() ? "null" : quote(r.error)) +
         ", \"mismatch\": " + mismatch_json(r.mismatch, r.name);
    if (r.timed) {
      double bound = (r.comp_ms + r.comm_ms) / std::max(1e-9, std::max(r.comp_ms, r.comm_ms));
      o += ", \"baseline_ms\": " + num(r.base_ms) + ", \"candidate_ms\": " + num(r.cand_ms) +
           ", \"speedup\": " + num(r.speedup) + ", \"baseline_spread\": " +
           num(r.base_spread) + ", \"candidate_spread\": " + num(r.cand_spread) + ", \"comp_ms\": " +
           num(r.comp_ms) + ", \"comm_ms\": " + num(r.comm_ms) + ", \"bound\": " + num(bound) +
           ", \"speedup_interval\": [" + num(r.speedup_lo) + ", " + num(r.speedup_hi) + "], \"rounds\": [";
      for (size_t k = 0; k < r.round_base.size(); ++k)
        o += std::string(k ? ", " : "") + "[" + num(r.round_base[k]) + ", " + num(r.round_cand[k]) + ", " +
             std::to_string(r.round_cand_first[k]) + "]";
      o += "]";
    }
    if (!r.timeline.empty()) o += ", \"timeline\": " + r.timeline;
    o += "}";
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  o += "], \"timed_ms\": " + num(run.timed_ms) + ", \"check_ms\": " + num(run.check_ms) + ", \"nonce\": " + quote(nonce) + ", \"env\": {\"host\": " + quote(host) + ", \"compiler\": " + quote(__VERSION__) +
       ", \"ranks\": " + std::to_string(R) + ", \"candidate_uid\": " + std::to_string(cand.uid()) +
       ", \"judge_uid\": " + std::to_string((long)geteuid()) + ", \"hw_threads\": " +
       std::to_string(std::thread::hardware_concurrency()) + "}}\n";
  // The ranks' processes end before the verdict exists: nothing of theirs runs after it.
  for (Region* sh : {csh, bsh}) {
    sh->cmd = kQuit;
    sh->cmd_seq.fetch_add(1);
    futex_wake(&sh->cmd_seq);
  }
  cand.finish();
  base.finish();
  return write_verdict(o, 0);
}
