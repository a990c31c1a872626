// cuco_device.cuh -- device helpers for candidates: bounded spin-waits and release/acquire flags.
// Frozen harness file; a candidate includes it outside its EVOLVE-BLOCKs.
// NCCL 2.28 device-side waits never time out, so every wait a candidate writes itself goes through
// cuco_wait_geq (bounded by %globaltimer) and reports an expired bound through ctx->timeout_flag.
#ifndef CUCO_DEVICE_CUH
#define CUCO_DEVICE_CUH
#include <cstdint>

static __device__ __forceinline__ unsigned long long cuco_globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __device__ __forceinline__ unsigned int cuco_ld_acquire_sys(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ void cuco_st_release_sys(unsigned int* p, unsigned int v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ unsigned int cuco_atomic_add_release_sys(unsigned int* p, unsigned int v) {
  unsigned int old;
  asm volatile("atom.release.sys.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// Waits until *flag >= value (unsigned, wrap-safe by difference) or timeout_ns passes.
// Returns true when the value arrived; on timeout raises *timeout_report (if given) and returns false.
static __device__ __forceinline__ bool cuco_wait_geq(const unsigned int* flag, unsigned int value,
                                                     unsigned long long timeout_ns,
                                                     unsigned int* timeout_report) {
  unsigned long long t0 = cuco_globaltimer_ns();
  unsigned int spins = 0;
  while ((int)(cuco_ld_acquire_sys(flag) - value) < 0) {
    if (((++spins) & 63u) == 0u) {
      if (cuco_globaltimer_ns() - t0 > timeout_ns) {
        if (timeout_report) atomicExch(timeout_report, 1u);
        return false;
      }
      __nanosleep(64);
    }
  }
  return true;
}
#endif  // CUCO_DEVICE_CUH
