// The harnesses' clock: CLOCK_MONOTONIC read through a path the candidate cannot interpose on.
//
// The candidate is linked into the harness's executable, so a clock reached through a symbol
// (clock_gettime, std::chrono::steady_clock::now) is only as safe as the symbol policy that keeps the
// candidate from defining it. This one does not depend on that: cuco_clock::init(), called first thing
// in main (before cuco_setup or any other candidate code), finds the kernel's vDSO clock_gettime through
// the auxiliary vector and keeps a function pointer to it; without a vDSO it issues the system call
// itself (x86-64, aarch64). `Clock` is a std::chrono clock, a drop-in for steady_clock.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <elf.h>
#include <link.h>
#include <sys/auxv.h>

// A clock that runs fast, for the test of the launcher's cross-check only (a build flag: a candidate has
// no preprocessor lines and no say in the build command).
#ifndef CUCO_CLOCK_SCALE
#define CUCO_CLOCK_SCALE 1
#endif

namespace cuco_clock {
namespace {   // internal linkage: nothing here is a symbol another object could define or replace

using vdso_fn = int (*)(clockid_t, struct timespec*);

inline vdso_fn& vdso_clock() {
  static vdso_fn fn = nullptr;
  return fn;
}

// The vDSO's own clock_gettime, found in its dynamic symbol table (it is an ordinary ELF image).
inline vdso_fn find_vdso_clock() {
  const uintptr_t base = getauxval(AT_SYSINFO_EHDR);
  if (!base) return nullptr;
  const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(base);
  const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(base + eh->e_phoff);
  uintptr_t load = 0;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type == PT_LOAD && load == 0) load = base + ph[i].p_offset - ph[i].p_vaddr;
    if (ph[i].p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(base + ph[i].p_offset);
  }
  if (!dyn) return nullptr;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* hash = nullptr;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(load + d->d_un.d_ptr);
    if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(load + d->d_un.d_ptr);
    if (d->d_tag == DT_HASH) hash = reinterpret_cast<const uint32_t*>(load + d->d_un.d_ptr);
  }
  if (!symtab || !strtab || !hash) return nullptr;   // DT_HASH gives the symbol count (nchain)
  for (uint32_t i = 0; i < hash[1]; ++i) {
    const char* name = strtab + symtab[i].st_name;
    if ((!strcmp(name, "__vdso_clock_gettime") || !strcmp(name, "__kernel_clock_gettime")) && symtab[i].st_value)
      return reinterpret_cast<vdso_fn>(load + symtab[i].st_value);
  }
  return nullptr;
}

inline void init() { vdso_clock() = find_vdso_clock(); }

inline void read_monotonic(struct timespec* ts) {
  if (vdso_fn fn = vdso_clock()) {
    fn(CLOCK_MONOTONIC, ts);
    return;
  }
#if defined(__x86_64__)
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "0"(228L /* clock_gettime */), "D"((long)CLOCK_MONOTONIC), "S"(ts)
                   : "rcx", "r11", "memory");
  (void)ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = 113;   // clock_gettime
  register long x0 __asm__("x0") = CLOCK_MONOTONIC;
  register long x1 __asm__("x1") = (long)ts;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1) : "memory");
#else
  clock_gettime(CLOCK_MONOTONIC, ts);   // no raw path on this architecture: the symbol policy guards it
#endif
}

struct Clock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<Clock, duration>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept {
    struct timespec ts;
    read_monotonic(&ts);
    return time_point(duration(((rep)ts.tv_sec * 1000000000 + ts.tv_nsec) * CUCO_CLOCK_SCALE));
  }
};

}  // namespace
}  // namespace cuco_clock
