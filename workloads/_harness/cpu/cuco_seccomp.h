// The CPU harness's system-call filter (seccomp-bpf), installed on every thread of the process before the
// first candidate instruction (cuco_setup). The symbol policy reads names; a candidate that computes a
// pointer to `syscall`, or runs bytes of its own as a syscall stub, or reads a clock with no symbol,
// gets past names. The kernel sees every system call whatever its origin: only those the harness's
// design needs pass.
//
//   allowed:  memory (brk, munmap, mremap, madvise; mmap and mprotect without PROT_EXEC: no new code),
//             threads (clone with CLONE_THREAD only, futex, robust lists, rseq, exit), sleeping and
//             yielding, reading clocks, files through descriptors (the job's sandbox confines the paths),
//             the process's own ids, sched_getaffinity, uname, getrandom
//   refused:  everything else, among them fork/vfork/clone of a process, exec, ptrace, kill/tgkill and
//             every signal call (the harness arms no signal but SIGSYS, before the filter), timers
//             (timer_create, setitimer, alarm), setting clocks, affinity and scheduling, rlimits,
//             sockets, mount, namespaces, seccomp itself, io_uring, process_vm_*, personality
// It is installed in the processes that run the ranks (never in the judge, which runs no candidate code).
// A refused call raises SIGSYS, whose handler (the harness's) leaves the reason, naming the call, where the
// judge reads it, and ends the process: no candidate code runs after it.
#pragma once
#if defined(__linux__) && defined(__x86_64__)
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace cuco_seccomp {

inline const char* name_of(long nr) {
  switch (nr) {
    case SYS_fork: return "fork"; case SYS_vfork: return "vfork"; case SYS_clone: return "clone (a new process)";
    case SYS_clone3: return "clone3"; case SYS_execve: return "execve"; case SYS_execveat: return "execveat";
    case SYS_ptrace: return "ptrace"; case SYS_kill: return "kill"; case SYS_tkill: return "tkill";
    case SYS_tgkill: return "tgkill (a signal: abort() or raise()?)"; case SYS_rt_sigaction: return "rt_sigaction";
    case SYS_timer_create: return "timer_create"; case SYS_timer_settime: return "timer_settime";
    case SYS_setitimer: return "setitimer"; case SYS_alarm: return "alarm"; case SYS_clock_settime: return "clock_settime";
    case SYS_settimeofday: return "settimeofday"; case SYS_adjtimex: return "adjtimex";
    case SYS_sched_setaffinity: return "sched_setaffinity"; case SYS_setpriority: return "setpriority";
    case SYS_prlimit64: return "prlimit64"; case SYS_setrlimit: return "setrlimit"; case SYS_socket: return "socket";
    case SYS_mmap: return "mmap (executable memory)"; case SYS_mprotect: return "mprotect (executable memory)";
    case SYS_pkey_mprotect: return "pkey_mprotect"; case SYS_prctl: return "prctl"; case SYS_seccomp: return "seccomp";
    case SYS_process_vm_readv: return "process_vm_readv"; case SYS_process_vm_writev: return "process_vm_writev";
    case SYS_memfd_create: return "memfd_create"; case SYS_personality: return "personality";
    default: return nullptr;
  }
}

// Where the SIGSYS handler says why: a buffer in the memory the judge shares with the ranks' process
// (cuco_shared.h). The handler writes the reason there and ends the process; the judge, which sees it end,
// writes the verdict (the ranks' process has no nonce and no result path).
struct Verdict {
  char* out = nullptr;
  size_t cap = 0;
};
inline Verdict g_verdict;

inline size_t put(char* out, size_t at, size_t cap, const char* s) {
  while (*s && at + 1 < cap) out[at++] = *s++;
  return at;
}

inline void on_sigsys(int, siginfo_t* si, void*) {
  char buf[1024];
  size_t n = put(buf, 0, sizeof buf, "the candidate made a system call the harness's filter refuses: ");
  const char* name = name_of(si->si_syscall);
  if (name) {
    n = put(buf, n, sizeof buf, name);
  } else {
    char num[24]; int k = 0; long v = si->si_syscall; char rev[24]; int r = 0;
    if (v <= 0) rev[r++] = '0';
    while (v > 0 && r < 20) { rev[r++] = (char)('0' + v % 10); v /= 10; }
    while (r) num[k++] = rev[--r];
    num[k] = 0;
    n = put(buf, n, sizeof buf, "number ");
    n = put(buf, n, sizeof buf, num);
  }
  n = put(buf, n, sizeof buf, " (only memory, threads, waiting and reading clocks are allowed: no processes, "
                              "signals, timers, scheduling or new executable memory)");
  buf[n] = 0;
  if (g_verdict.out && g_verdict.cap) {
    size_t i = 0;
    for (; i + 1 < g_verdict.cap && buf[i]; ++i) g_verdict.out[i] = buf[i];
    g_verdict.out[i] = 0;
  }
  syscall(SYS_exit_group, 3);
}

class Builder {
 public:
  void allow(long nr) { eq(nr, SECCOMP_RET_ALLOW); }
  void eq(long nr, unsigned action) {
    prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1));
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, action));
  }
  // nr passes unless (low 32 bits of) argument `arg` has any of `bits` (when `refuse_if_set`), or lacks them.
  void allow_by_flag(long nr, int arg, unsigned bits, bool refuse_if_set) {
    prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 4));
    prog_.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (unsigned)(offsetof(seccomp_data, args) + 8 * arg)));
    prog_.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, bits, 0, 1));
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, refuse_if_set ? SECCOMP_RET_TRAP : SECCOMP_RET_ALLOW));
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, refuse_if_set ? SECCOMP_RET_ALLOW : SECCOMP_RET_TRAP));
  }
  std::vector<sock_filter> finish() {
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP));
    return prog_;
  }
  std::vector<sock_filter> prog_{
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (unsigned)offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (unsigned)offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),   // the x32 ABI: another numbering
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
  };
};

// Install the filter on every thread of the process (TSYNC). A refused call's reason goes to `why_out`
// (cap bytes). Returns "" or why it could not (the harness then fails the job: a harness that cannot
// confine its candidate does not measure it).
inline std::string install(char* why_out, size_t cap) {
  g_verdict.out = why_out;
  g_verdict.cap = cap;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, nullptr) != 0) return std::string("sigaction(SIGSYS): ") + strerror(errno);
  Builder b;   // the accumulator holds the call's number from here on
  // The calls a rank makes while it runs (waiting, yielding, the clock's fallback) first: the filter runs on
  // every system call, and a wait-heavy candidate must not pay more for it than the baseline does.
  for (long nr : {SYS_futex, SYS_sched_yield, SYS_clock_gettime, SYS_clock_nanosleep, SYS_nanosleep,
                  SYS_read, SYS_write, SYS_pread64, SYS_pwrite64, SYS_readv, SYS_writev, SYS_close, SYS_fstat,
                  SYS_newfstatat, SYS_statx, SYS_lseek, SYS_openat, SYS_getdents64, SYS_rename, SYS_renameat,
                  SYS_renameat2, SYS_unlink, SYS_fsync, SYS_brk, SYS_munmap, SYS_mremap, SYS_madvise,
                  SYS_set_robust_list, SYS_get_robust_list, SYS_rseq, SYS_rt_sigprocmask, SYS_rt_sigreturn,
                  SYS_clock_getres,
                  SYS_gettimeofday, SYS_getpid, SYS_gettid, SYS_getppid, SYS_sched_getaffinity, SYS_uname,
                  SYS_getrandom, SYS_exit, SYS_exit_group, SYS_membarrier, SYS_sysinfo})
    b.allow(nr);
  b.eq(SYS_ioctl, SECCOMP_RET_ERRNO | ENOTTY);    // stdio asks whether stdout is a terminal: it is not
  b.eq(SYS_clone3, SECCOMP_RET_ERRNO | ENOSYS);   // glibc then creates threads with clone, checked below
  b.allow_by_flag(SYS_clone, 0, CLONE_THREAD, false);          // threads, never processes
  b.allow_by_flag(SYS_mmap, 2, PROT_EXEC, true);               // no new executable memory
  b.allow_by_flag(SYS_mprotect, 2, PROT_EXEC, true);
  std::vector<sock_filter> prog = b.finish();   // (an argument test loads over the number, but it returns either way)
  sock_fprog fprog{(unsigned short)prog.size(), prog.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return std::string("PR_SET_NO_NEW_PRIVS: ") + strerror(errno);
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog) != 0)
    return std::string("seccomp: ") + strerror(errno);
  return "";
}

}  // namespace cuco_seccomp
#define CUCO_HAVE_SECCOMP 1
#endif
