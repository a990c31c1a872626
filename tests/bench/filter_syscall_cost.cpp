// What the CPU harness's system-call filter costs a system call a waiting rank makes (a futex wake), without
// and with the filter, 10^6 calls each, twice. docs/PERFORMANCE.md has a run:
//   g++ -O2 -std=c++17 -I workloads/_harness/cpu tests/bench/filter_syscall_cost.cpp -o /tmp/fc && /tmp/fc
#include "cuco_seccomp.h"
#include <chrono>
#include <cstdio>
int main() {
  auto t = [] { auto t0 = std::chrono::steady_clock::now(); for (int i = 0; i < 1000000; ++i) syscall(SYS_futex, nullptr, 1 /*WAKE*/, 0, 0, 0, 0);
                return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1e6; };
  double a = t(), a2 = t();
  std::string why = cuco_seccomp::install("/tmp/filter_cost_result.json", "{", "}");
  double b = t(), b2 = t();
  printf("futex wake: %.0f %.0f ns without the filter, %.0f %.0f ns with (%s)\n", a, a2, b, b2, why.c_str());
}
