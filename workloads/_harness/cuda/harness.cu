// harness.cu -- the frozen multi-GPU harness shared by every CUDA workload ("cuco-cuda/1").
//
//   ./bench --spec spec.json --result result.json      (launch.command; no mpirun needed)
//   ./bench --self-test-json result.json               (host only: writes a synthetic result.json)
//   ./bench --self-test-host-comm R                    (host only: the host collectives among R rank processes)
//
// The parent process (the one the engine starts) never touches CUDA. It forks and execs one child per
// rank (`--child-rank R`), gives them a private directory through which rank 0 passes the NCCL unique
// id (a file, renamed into place atomically) and the memory of the host communicators (ctx->host_comm:
// MPI-like host collectives among the ranks' processes: the candidate's, the baseline's and the
// verification reference's; made before the fork, never mapped by the launcher), waits for all of them under one deadline (spec
// `timeout_s`, default 240 s), kills every rank with SIGKILL when one fails or the deadline passes,
// reads the per-rank result files and writes result.json. Children die with the parent
// (PR_SET_PDEATHSIG). Works as root and as an ordinary user.
//
// Each child: cudaSetDevice(R); ncclCommInitRank; ncclGetVersion() == NCCL_VERSION_CODE or it stops;
// a second communicator (split) for the harness's own collectives. Per config (the spec's configs whose
// `ranks` param, if any, equals the job's rank count):
//   1. the workload's problem.cu describes the buffers; the harness allocates them with ncclMemAlloc and
//      registers NCCL symmetric windows; inputs are made from the spec's seed into harness-private
//      pristine copies and copied into the windows;
//   2. candidate setup, baseline setup (collective, same order on every rank);
//   3. verification: candidate, baseline, candidate -- outputs poisoned (0xFF) before every call, every
//      rank's outputs checked by problem.cu (bit-exact for moved data, dtype tolerance vs an fp32
//      reference for computed data, NaN/Inf fail), inputs checked unchanged after every call;
//   4. benchmark mode: fresh inputs from a new seed; warm-ups; then per iteration, in this order,
//      baseline compute-only, baseline comm-only, then baseline and candidate (which goes first drawn for
//      each pair of iterations from the job's seed, the pair's second iteration the other way), each call preceded by
//      poisoning the outputs, an L2 flush (a 256 MiB write), resetting persisting L2 lines, and a rank
//      alignment (an all-reduce on the timed stream), timed with CUDA events on ctx->stream, followed by
//      a device-wide synchronize; the host wall time of each call is kept too, and a candidate whose
//      wall time exceeds its event time by far more than the baseline's does is failed ("work escaped
//      the timed stream"); every iteration gets fresh inputs, and EVERY candidate call (warm-ups and
//      timed ones alike) is verified, untimed: as in step 3, or by the problem's sampled check where it
//      has one (cuco_problem.h: verify_sample, on outputs picked after the call from the kernel's
//      entropy); the number of warm-ups is random;
//   5. the per-call spin-wait flag (ctx->timeout_flag) is read after every call.
//      Iterations go on past `iters` until the 95 % interval of the per-iteration ratio (ratio_interval) is
//      narrower than `target_width` of its median, or `max_iters` have run (every rank decides alike, from
//      the same all-reduced times).
// The parent takes, per iteration, the max over ranks and reports the median of the per-iteration ratios,
// its interval, the raw iterations, and medians and interquartile ranges of the times.
#include "cuco_abi.h"
#include "cuco_problem.h"
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <nccl.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define CUCO_HARNESS_NAME "cuco-cuda/1"

// ------------------------------------------------------------------------------------------------
// A small JSON value and parser (spec.json) and writer (result.json).
// ------------------------------------------------------------------------------------------------
struct JVal {
  enum T { NUL, BOOL, NUM, STR, ARR, OBJ } t = NUL;
  bool b = false; double n = 0; std::string s;
  std::vector<JVal> a; std::vector<std::pair<std::string, JVal>> o;
  const JVal* get(const char* k) const {
    if (t != OBJ) return nullptr;
    for (auto& kv : o) if (kv.first == k) return &kv.second;
    return nullptr;
  }
};

struct JParser {
  const char* p; const char* end; std::string err;
  void ws() { while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++; }
  bool fail(const char* m) { if (err.empty()) err = m; return false; }
  bool str(std::string& out) {
    if (p >= end || *p != '"') return fail("expected string");
    p++;
    while (p < end && *p != '"') {
      if (*p == '\\') {
        p++; if (p >= end) return fail("bad escape");
        char c = *p++;
        switch (c) {
          case 'n': out += '\n'; break; case 't': out += '\t'; break; case 'r': out += '\r'; break;
          case 'b': out += '\b'; break; case 'f': out += '\f'; break;
          case 'u': { if (end - p < 4) return fail("bad \\u"); unsigned v = strtoul(std::string(p, 4).c_str(), nullptr, 16); p += 4;
                      if (v < 0x80) out += (char)v; else if (v < 0x800) { out += (char)(0xC0 | (v >> 6)); out += (char)(0x80 | (v & 63)); }
                      else { out += (char)(0xE0 | (v >> 12)); out += (char)(0x80 | ((v >> 6) & 63)); out += (char)(0x80 | (v & 63)); } break; }
          default: out += c;
        }
      } else out += *p++;
    }
    if (p >= end) return fail("unterminated string");
    p++; return true;
  }
  bool val(JVal& v, int depth = 0) {
    if (depth > 64) return fail("too deep");
    ws(); if (p >= end) return fail("unexpected end");
    if (*p == '{') {
      v.t = JVal::OBJ; p++; ws();
      if (p < end && *p == '}') { p++; return true; }
      while (true) {
        ws(); std::string k; if (!str(k)) return false; ws();
        if (p >= end || *p != ':') return fail("expected ':'"); p++;
        JVal x; if (!val(x, depth + 1)) return false; v.o.emplace_back(k, std::move(x)); ws();
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == '}') { p++; return true; }
        return fail("expected ',' or '}'");
      }
    }
    if (*p == '[') {
      v.t = JVal::ARR; p++; ws();
      if (p < end && *p == ']') { p++; return true; }
      while (true) {
        JVal x; if (!val(x, depth + 1)) return false; v.a.push_back(std::move(x)); ws();
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == ']') { p++; return true; }
        return fail("expected ',' or ']'");
      }
    }
    if (*p == '"') { v.t = JVal::STR; return str(v.s); }
    if (!strncmp(p, "true", 4)) { v.t = JVal::BOOL; v.b = true; p += 4; return true; }
    if (!strncmp(p, "false", 5)) { v.t = JVal::BOOL; v.b = false; p += 5; return true; }
    if (!strncmp(p, "null", 4)) { v.t = JVal::NUL; p += 4; return true; }
    char* e = nullptr; v.n = strtod(p, &e);
    if (e == p) return fail("bad value");
    v.t = JVal::NUM; p = e; return true;
  }
};

static bool read_file(const std::string& path, std::string& out) {
  FILE* f = fopen(path.c_str(), "rb"); if (!f) return false;
  char buf[65536]; size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, k);
  fclose(f); return true;
}

static std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\""; else if (c == '\\') o += "\\\\"; else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t"; else if (c == '\r') o += "\\r";
    else if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += (char)c;
  }
  return o + "\"";
}
static std::string jnum(double x) {
  if (!std::isfinite(x)) return "null";
  char b[64]; snprintf(b, sizeof b, "%.6g", x); return b;
}
static std::string jnum_or_null(bool have, double x) { return have ? jnum(x) : std::string("null"); }

// ------------------------------------------------------------------------------------------------
// Aggregated results (parent side) and their JSON.
// ------------------------------------------------------------------------------------------------
struct Mismatch { bool found = false; int rank = -1; long long index = -1; double expected = 0, got = 0; std::string what, buffer; };
struct ConfigResult {
  std::string name; bool ran = false, correct = false; std::string error;
  Mismatch mm;
  bool timed = false;
  double baseline_ms = NAN, candidate_ms = NAN, baseline_spread = NAN, candidate_spread = NAN;
  double comp_ms = NAN, comm_ms = NAN;
  double speedup = NAN, speedup_lo = NAN, speedup_hi = NAN;   // median of per-iteration ratios, its 95 % interval
  std::vector<double> round_base, round_cand, round_cand_first;   // the raw iterations (max over ranks)
  std::string timeline, timeline_error;   // the profiled call's records (JSON), or why there are none
};
struct JobResult {
  std::string mode = "verify"; bool correct = false; std::string error; int ranks = 0;
  std::string nonce;   // the job's nonce, echoed: a result.json written by anyone else lacks it
  std::string environment;   // a failure of the node's, before any candidate code ran (GPU, NCCL), or empty
  double timed_ms = 0; // every timed call's event time (max over ranks) added up: the launcher checks it fits its wall time
  double check_ms = 0; // the untimed fresh inputs and per-call verification of the benchmark loops (slowest rank's)
  std::vector<ConfigResult> configs;
  std::map<std::string, std::string> env;
};

static std::string result_json(const JobResult& r) {
  std::string o = "{";
  o += "\"harness\": " + jstr(CUCO_HARNESS_NAME) + ", \"mode\": " + jstr(r.mode);
  o += ", \"correct\": " + std::string(r.correct ? "true" : "false");
  o += ", \"error\": " + (r.error.empty() ? std::string("null") : jstr(r.error));
  o += ", \"ranks\": " + std::to_string(r.ranks);
  o += ", \"nonce\": " + (r.nonce.empty() ? std::string("null") : jstr(r.nonce));
  if (!r.environment.empty()) o += ", \"environment\": {\"kind\": \"GPU\", \"reason\": " + jstr(r.environment) + "}";
  o += ", \"timed_ms\": " + jnum(r.timed_ms) + ", \"check_ms\": " + jnum(r.check_ms);
  o += ", \"configs\": [";
  for (size_t i = 0; i < r.configs.size(); i++) {
    const ConfigResult& c = r.configs[i];
    if (i) o += ", ";
    o += "{\"name\": " + jstr(c.name) + ", \"correct\": " + (c.correct ? "true" : "false");
    o += ", \"error\": " + (c.error.empty() ? std::string("null") : jstr(c.error));
    if (c.mm.found) {
      o += ", \"mismatch\": {\"rank\": " + std::to_string(c.mm.rank) + ", \"config\": " + jstr(c.name) +
           ", \"index\": " + std::to_string(c.mm.index) + ", \"expected\": " + jnum(c.mm.expected) +
           ", \"got\": " + (std::isfinite(c.mm.got) ? jnum(c.mm.got) : jstr(std::isnan(c.mm.got) ? "nan" : (c.mm.got > 0 ? "inf" : "-inf"))) +
           ", \"what\": " + jstr(c.mm.what) + ", \"buffer\": " + jstr(c.mm.buffer) + "}";
    } else o += ", \"mismatch\": null";
    bool t = c.timed;
    double speedup = c.speedup;
    double mx = std::max(c.comp_ms, c.comm_ms);
    double bound = t ? (c.comp_ms + c.comm_ms) / mx : NAN;
    o += ", \"baseline_ms\": " + jnum_or_null(t, c.baseline_ms) + ", \"candidate_ms\": " + jnum_or_null(t, c.candidate_ms);
    o += ", \"speedup\": " + jnum_or_null(t, speedup);
    o += ", \"baseline_spread\": " + jnum_or_null(t, c.baseline_spread) + ", \"candidate_spread\": " + jnum_or_null(t, c.candidate_spread);
    o += ", \"comp_ms\": " + jnum_or_null(t, c.comp_ms) + ", \"comm_ms\": " + jnum_or_null(t, c.comm_ms);
    o += ", \"bound\": " + jnum_or_null(t, bound);
    o += ", \"bound_ms\": " + jnum_or_null(t, mx);
    if (t) {
      o += ", \"speedup_interval\": [" + jnum(c.speedup_lo) + ", " + jnum(c.speedup_hi) + "], \"rounds\": [";
      for (size_t k = 0; k < c.round_base.size(); k++)
        o += std::string(k ? ", " : "") + "[" + jnum(c.round_base[k]) + ", " + jnum(c.round_cand[k]) + ", " +
             std::to_string((int)c.round_cand_first[k]) + "]";
      o += "]";
    }
    if (!c.timeline.empty()) o += ", \"timeline\": " + c.timeline;
    else if (!c.timeline_error.empty()) o += ", \"timeline_error\": " + jstr(c.timeline_error);
    o += "}";
  }
  o += "], \"env\": {";
  bool first = true;
  for (auto& kv : r.env) { if (!first) o += ", "; first = false; o += jstr(kv.first) + ": " + jstr(kv.second); }
  o += "}}\n";
  return o;
}

// The verdict's channel (the launching process's): result.json is created before any rank (any candidate
// code) exists, after whatever an earlier attempt left is removed, with O_EXCL and O_NOFOLLOW; the verdict
// goes through that descriptor, every error checked, once every rank has ended; the path must then still
// name this file, or a new one says it was replaced. Any failure: an exit status other than 0, and the
// engine believes no result of such a job.
class ResultFile {
 public:
  bool create(const std::string& path) {
    path_ = path;
    unlink(path.c_str());
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd_ >= 0 && fstat(fd_, &st_) == 0;
  }
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

static bool write_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = fopen(tmp.c_str(), "wb"); if (!f) return false;
  bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (fclose(f) == 0) && ok;
  if (!ok) { unlink(tmp.c_str()); return false; }
  return rename(tmp.c_str(), path.c_str()) == 0;
}

// ------------------------------------------------------------------------------------------------
// Spec
// ------------------------------------------------------------------------------------------------
struct SpecConfig { std::string name; std::vector<std::pair<std::string, long long>> params; };
struct Spec {
  std::string mode = "verify"; unsigned long long seed = 1; int ranks = 0; int warmup = 2, iters = 9;
  int max_iters = 0; double target_width = 0;   // adaptive rounds: see ratio_interval
  double timeout_s = 240; double spin_timeout_ms = 2000;
  bool timeline = true;   // one profiled call per config after the timed loop (CUPTI, where it loads)
  std::map<std::string, double> tol;
  std::vector<SpecConfig> configs;
};

static bool parse_spec(const std::string& path, Spec& sp, std::string& err) {
  std::string text;
  if (!read_file(path, text)) { err = "cannot read spec " + path; return false; }
  JParser jp{text.data(), text.data() + text.size(), ""}; JVal v;
  if (!jp.val(v) || v.t != JVal::OBJ) { err = "spec " + path + ": invalid JSON (" + jp.err + ")"; return false; }
  if (auto x = v.get("mode")) { if (x->t != JVal::STR || (x->s != "verify" && x->s != "benchmark")) { err = "spec: mode must be verify|benchmark"; return false; } sp.mode = x->s; }
  if (auto x = v.get("seed")) { if (x->t != JVal::NUM) { err = "spec: seed must be a number"; return false; } sp.seed = (unsigned long long)x->n; }
  if (auto x = v.get("ranks")) { if (x->t != JVal::NUM || x->n < 1 || x->n > 64) { err = "spec: ranks must be 1..64"; return false; } sp.ranks = (int)x->n; }
  if (auto x = v.get("warmup")) if (x->t == JVal::NUM) sp.warmup = std::max(0, (int)x->n);
  if (auto x = v.get("iters")) if (x->t == JVal::NUM) sp.iters = std::max(1, (int)x->n);
  if (auto x = v.get("max_iters")) if (x->t == JVal::NUM) sp.max_iters = (int)x->n;
  if (auto x = v.get("target_width")) if (x->t == JVal::NUM && x->n >= 0) sp.target_width = x->n;
  sp.max_iters = std::max(sp.max_iters, sp.iters);
  if (auto x = v.get("timeout_s")) if (x->t == JVal::NUM && x->n > 0) sp.timeout_s = x->n;
  if (auto x = v.get("spin_timeout_ms")) if (x->t == JVal::NUM && x->n > 0) sp.spin_timeout_ms = x->n;
  if (auto x = v.get("timeline")) if (x->t == JVal::BOOL) sp.timeline = x->b;
  if (auto x = v.get("tolerances")) if (x->t == JVal::OBJ) for (auto& kv : x->o) if (kv.second.t == JVal::NUM) sp.tol[kv.first] = kv.second.n;
  auto cs = v.get("configs");
  if (!cs || cs->t != JVal::ARR || cs->a.empty()) { err = "spec: configs must be a non-empty list"; return false; }
  for (auto& c : cs->a) {
    SpecConfig sc;
    auto n = c.get("name"); if (!n || n->t != JVal::STR) { err = "spec: every config needs a name"; return false; }
    sc.name = n->s;
    if (auto ps = c.get("params")) {
      if (ps->t != JVal::OBJ) { err = "spec: config " + sc.name + ": params must be an object"; return false; }
      for (auto& kv : ps->o) {
        if (kv.second.t != JVal::NUM) { err = "spec: config " + sc.name + ": param " + kv.first + " must be an integer"; return false; }
        sc.params.emplace_back(kv.first, (long long)kv.second.n);
      }
    }
    if (sc.params.size() > CUCO_MAX_PARAMS) { err = "spec: config " + sc.name + ": too many params"; return false; }
    sp.configs.push_back(sc);
  }
  if (sp.ranks == 0) { err = "spec: ranks missing"; return false; }
  return true;
}

static long long cfg_param(const SpecConfig& c, const char* k, long long d) {
  for (auto& kv : c.params) if (kv.first == k) return kv.second;
  return d;
}

// ------------------------------------------------------------------------------------------------
// Helpers for problem.cu (device kernels)
// ------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33; return x;
}
__global__ void k_fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed, unsigned sid, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint64_t h = mix64(seed * 0x9E3779B97F4A7C15ULL + ((uint64_t)sid << 40) + i);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f);  // [0,1)
    p[i] = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}
extern "C" int cuco_h_fill_bf16(void* p, size_t n, unsigned long long seed, unsigned sid, float scale, cudaStream_t s) {
  k_fill_bf16<<<1024, 256, 0, s>>>((__nv_bfloat16*)p, n, seed, sid, scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

__global__ void k_first_diff_u16(const uint16_t* a, const uint16_t* b, size_t from, size_t n, unsigned long long* first) {
  for (size_t i = from + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (a[i] != b[i]) { atomicMin(first, (unsigned long long)i); return; }
}
// The same over 16-byte groups of 8 elements (both arrays 16-byte aligned): two-byte loads kept a compare
// of a large input far from the memory's bandwidth, and the inputs are compared after every call.
__global__ void k_first_diff_u16x8(const int4* a, const int4* b, size_t n8, unsigned long long* first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
    int4 x = a[i], y = b[i];
    if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) {
      const uint16_t* xs = reinterpret_cast<const uint16_t*>(&x);
      const uint16_t* ys = reinterpret_cast<const uint16_t*>(&y);
      int j = 0;
      while (xs[j] == ys[j]) j++;
      atomicMin(first, (unsigned long long)(i * 8 + j));
      return;
    }
  }
}
static unsigned long long* g_scratch64 = nullptr;  // device word for first-index reductions
extern "C" long long cuco_h_first_diff_u16(const void* a, const void* b, size_t n, cudaStream_t s,
                                           unsigned short* va, unsigned short* vb) {
  unsigned long long init = ~0ULL, got = 0;
  cudaMemcpyAsync(g_scratch64, &init, 8, cudaMemcpyHostToDevice, s);
  size_t n8 = ((uintptr_t)a | (uintptr_t)b) % 16 == 0 ? n / 8 : 0;
  if (n8) k_first_diff_u16x8<<<1024, 256, 0, s>>>((const int4*)a, (const int4*)b, n8, g_scratch64);
  if (n8 * 8 < n) k_first_diff_u16<<<1024, 256, 0, s>>>((const uint16_t*)a, (const uint16_t*)b, n8 * 8, n, g_scratch64);
  cudaMemcpyAsync(&got, g_scratch64, 8, cudaMemcpyDeviceToHost, s);
  if (cudaStreamSynchronize(s) != cudaSuccess) return -2;
  if (got == ~0ULL) return -1;
  if (va) cudaMemcpy(va, (const uint16_t*)a + got, 2, cudaMemcpyDeviceToHost);
  if (vb) cudaMemcpy(vb, (const uint16_t*)b + got, 2, cudaMemcpyDeviceToHost);
  return (long long)got;
}

// fp32 reference GEMM fused with the comparison: 64 x 64 tile per block, 4 x 4 per thread.
__global__ void __launch_bounds__(256) k_check_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                    const __nv_bfloat16* C, int M, int N, int K, long long ldc,
                                                    float tol, float scale, unsigned long long* first) {
  __shared__ float As[16][65], Bs[16][65];
  int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int i = threadIdx.x; i < 64 * 16; i += 256) {
      int r = i >> 4, kk = i & 15;
      As[kk][r] = (m0 + r < M && k0 + kk < K) ? __bfloat162float(A[(long long)(m0 + r) * K + k0 + kk]) : 0.f;
      Bs[kk][r] = (n0 + r < N && k0 + kk < K) ? __bfloat162float(B[(long long)(n0 + r) * K + k0 + kk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; kk++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) { a[i] = As[kk][ty + 16 * i]; b[i] = Bs[kk][tx + 16 * i]; }
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < M && n < N) {
        float g = __bfloat162float(C[(long long)m * ldc + n]);
        float d = fabsf(g - acc[i][j]);
        if (!(d <= tol * (fabsf(acc[i][j]) + scale))) atomicMin(first, (unsigned long long)m * N + n);
      }
    }
}
__global__ void k_ref_one(const __nv_bfloat16* A, const __nv_bfloat16* B, int K, int m, int n, float* out) {
  float s = 0.f;
  for (int k = 0; k < K; k++) s = fmaf(__bfloat162float(A[(long long)m * K + k]), __bfloat162float(B[(long long)n * K + k]), s);
  *out = s;
}
extern "C" long long cuco_h_check_gemm_bf16(const void* A, const void* B, const void* C, int M, int N, int K,
                                            long long ldc, double tol, double scale, cudaStream_t s,
                                            double* expected, double* got) {
  unsigned long long init = ~0ULL, bad = 0;
  cudaMemcpyAsync(g_scratch64, &init, 8, cudaMemcpyHostToDevice, s);
  dim3 grid((N + 63) / 64, (M + 63) / 64);
  k_check_gemm<<<grid, 256, 0, s>>>((const __nv_bfloat16*)A, (const __nv_bfloat16*)B, (const __nv_bfloat16*)C,
                                    M, N, K, ldc, (float)tol, (float)scale, g_scratch64);
  cudaMemcpyAsync(&bad, g_scratch64, 8, cudaMemcpyDeviceToHost, s);
  if (cudaStreamSynchronize(s) != cudaSuccess) return -2;
  if (bad == ~0ULL) return -1;
  int m = (int)(bad / N), n = (int)(bad % N);
  float* d; float e = 0; __nv_bfloat16 g;
  cudaMalloc(&d, 4);
  k_ref_one<<<1, 1, 0, s>>>((const __nv_bfloat16*)A, (const __nv_bfloat16*)B, K, m, n, d);
  cudaMemcpyAsync(&e, d, 4, cudaMemcpyDeviceToHost, s);
  cudaMemcpyAsync(&g, (const __nv_bfloat16*)C + (long long)m * ldc + n, 2, cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s); cudaFree(d);
  if (expected) *expected = e;
  if (got) *got = __bfloat162float(g);
  return (long long)bad;
}

// ------------------------------------------------------------------------------------------------
// Child (one rank)
// ------------------------------------------------------------------------------------------------
static int g_rank = -1;
static FILE* g_out = nullptr;  // the rank's result file (line records, flushed as they are written)

static void rec(const char* fmt, ...) {
  va_list ap; va_start(ap, fmt);
  vfprintf(g_out, fmt, ap); va_end(ap);
  fputc('\n', g_out); fflush(g_out);
}
static std::string clean(const std::string& s) {  // one line, no tabs
  std::string o = s; for (char& c : o) if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  return o;
}
// Until a rank calls the candidate's first function, a failure is the node's (its GPU, its NCCL): the rank
// says so with "envfatal", and the launcher's result names it as the environment's (faults.of_judge). Once
// candidate code has run in the process, nothing it could have written is taken for the node's word.
static bool g_candidate_ran = false;
[[noreturn]] static void child_fatal(const std::string& msg) {
  fprintf(stderr, "[rank %d] fatal: %s\n", g_rank, msg.c_str());
  if (g_out) rec("%s\t%s", g_candidate_ran ? "fatal" : "envfatal", clean(msg).c_str());
  _exit(3);
}
#define CKC(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) child_fatal(std::string("CUDA ") + #x + ": " + cudaGetErrorString(e_)); } while (0)
#define CKN(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) child_fatal(std::string("NCCL ") + #x + ": " + ncclGetErrorString(r_)); } while (0)

struct Impl {
  const char* name;
  int (*setup)(cuco_ctx*); int (*run)(cuco_ctx*); int (*teardown)(cuco_ctx*);
};

#if __has_include("cuco_clock.h")
#include "cuco_clock.h"   // the host clock through the vDSO, out of the candidate's reach
using HostClock = cuco_clock::Clock;
static void init_host_clock() { cuco_clock::init(); }
#else
using HostClock = std::chrono::steady_clock;   // guarded by the symbol policy alone
static void init_host_clock() {}
#endif
static double now_ms() {
  return std::chrono::duration<double, std::milli>(HostClock::now().time_since_epoch()).count();
}

// The seed of a sampled check, drawn once the call has returned from the kernel's entropy pool: no state
// of this process decides it, so no code that ran before the check can know which outputs it reads.
static unsigned long long draw_sample_seed() {
  unsigned long long v = 0;
  if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v) return v;
  FILE* f = fopen("/dev/urandom", "rb");
  size_t got = f ? fread(&v, sizeof v, 1, f) : 0;
  if (f) fclose(f);
  if (got != 1) child_fatal("no entropy for a sampled check (getrandom and /dev/urandom both failed)");
  return v;
}

// ------------------------------------------------------------------------------------------------
// Host communicator (cuco_abi.h: cuco_host_allreduce, ...): MPI-like host collectives among the ranks'
// processes. The launcher creates three memory files (the candidate's, the baseline's, the verification
// reference's communicator) before it forks the ranks and closes its own descriptors once they exist: it
// never maps them, so nothing in them reaches the verdict, and the nonce was read before they were made.
// Each rank maps all three and closes the descriptors; the candidate's ctx->host_comm is the first, so
// its use (or abuse) of it, even from a peer rank while this one verifies, cannot change what the
// baseline's or the reference's collectives compute (short of a pointer it computes: docs/threat-model.md).
//
// Layout: per rank a slot of a sequence word (its own cache line) and two payload buffers of
// kHostChunk bytes. Step g (every call is one or more steps, the same count on every rank): a rank writes
// its payload into buffer g % 2, publishes seq = g + 1 (release), and waits until every rank's seq >= g + 1
// (acquire); it then reads the others' buffer g % 2. A rank publishes g + 1 only after it has read step
// g - 1's buffers, so a rank that has seen every seq >= g + 1 may write buffer (g + 1) % 2 = (g - 1) % 2:
// no reader is left on it. Waits spin (a few microseconds), then yield, and give up after the bound.
// ------------------------------------------------------------------------------------------------
static const size_t kHostChunk = 16384;
static const size_t kHostSlot = 64 + 2 * kHostChunk;
static const int kHostMaxRanks = 64;

struct cuco_host_comm {
  int rank = 0, nranks = 0;
  unsigned char* base = nullptr;   // nranks slots in the shared mapping
  unsigned long long step = 0;     // steps taken (the same on every rank between calls)
  double timeout_s = 10;
  bool broken = false;             // a wait expired (the ranks' steps no longer match), or no memory
  char error[256] = "";
  char why[160] = "";              // why there is no shared memory (base null)
};

static unsigned long long* host_seq(cuco_host_comm* c, int r) { return (unsigned long long*)(c->base + (size_t)r * kHostSlot); }
static unsigned char* host_buf(cuco_host_comm* c, int r, unsigned long long step) {
  return c->base + (size_t)r * kHostSlot + 64 + (step % 2) * kHostChunk;
}
static void host_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
static int host_fail(cuco_host_comm* c, const char* fmt, ...) {
  va_list ap; va_start(ap, fmt); vsnprintf(c->error, sizeof c->error, fmt, ap); va_end(ap);
  return 1;
}

// One step: `bytes` of `mine` published (none for a rank with nothing to give), every rank waited for.
static int host_step(cuco_host_comm* c, const void* mine, size_t bytes, const char* what) {
  if (mine && bytes) memcpy(host_buf(c, c->rank, c->step), mine, bytes);
  const unsigned long long want = c->step + 1;
  __atomic_store_n(host_seq(c, c->rank), want, __ATOMIC_RELEASE);
  for (int r = 0; r < c->nranks; r++) {
    unsigned long long spins = 0;
    auto deadline = std::chrono::steady_clock::time_point::max();
    while (__atomic_load_n(host_seq(c, r), __ATOMIC_ACQUIRE) < want) {
      if (++spins < 20000) { host_relax(); continue; }
      if (deadline == std::chrono::steady_clock::time_point::max())
        deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(c->timeout_s));
      else if ((spins & 255) == 0 && std::chrono::steady_clock::now() > deadline) {
        c->broken = true;
        return host_fail(c, "host collective %s: rank %d did not arrive within %.1f s (rank %d waited at its step %llu): "
                         "every rank must make the same host collective calls in the same order",
                         what, r, c->timeout_s, c->rank, c->step + 1);
      }
      sched_yield();
    }
  }
  c->step++;
  return 0;
}

static size_t host_size(cuco_host_datatype t) {
  switch (t) {
    case CUCO_HOST_BYTE: case CUCO_HOST_CHAR: return 1;
    case CUCO_HOST_INT: return sizeof(int);
    case CUCO_HOST_LONG_LONG: return sizeof(long long);
    case CUCO_HOST_FLOAT: return sizeof(float);
    case CUCO_HOST_DOUBLE: return sizeof(double);
  }
  return 0;
}

template <typename T> static void host_combine(T* acc, const T* x, size_t n, cuco_host_op op) {
  for (size_t i = 0; i < n; i++)
    acc[i] = op == CUCO_HOST_SUM ? (T)(acc[i] + x[i]) : op == CUCO_HOST_MAX ? (x[i] > acc[i] ? x[i] : acc[i]) : (x[i] < acc[i] ? x[i] : acc[i]);
}
static void host_combine_any(void* acc, const void* x, size_t n, cuco_host_datatype t, cuco_host_op op) {
  switch (t) {
    case CUCO_HOST_INT: host_combine((int*)acc, (const int*)x, n, op); break;
    case CUCO_HOST_LONG_LONG: host_combine((long long*)acc, (const long long*)x, n, op); break;
    case CUCO_HOST_FLOAT: host_combine((float*)acc, (const float*)x, n, op); break;
    case CUCO_HOST_DOUBLE: host_combine((double*)acc, (const double*)x, n, op); break;
    default: break;
  }
}

static int host_check(cuco_host_comm* c, const char* what) {
  if (!c) return 1;
  if (!c->base) return host_fail(c, "host collective %s: no host communicator in this job (%s)", what, c->why);
  if (c->broken) return host_fail(c, "host collective %s: refused, an earlier host collective of this communicator timed out", what);
  return 0;
}

// The reduction of every rank's `send` (in rank order: the same bits everywhere) into `recv` where
// `root` is this rank or -1 (all ranks).
static int host_reduce_to(const void* send, void* recv, size_t count, cuco_host_datatype t, cuco_host_op op, int root,
                          cuco_host_comm* c, const char* what) {
  if (host_check(c, what)) return 1;
  const size_t es = host_size(t);
  if (es == 0 || t == CUCO_HOST_BYTE || t == CUCO_HOST_CHAR) return host_fail(c, "host collective %s: datatype %d cannot be reduced (int, long long, float or double)", what, (int)t);
  if (op != CUCO_HOST_SUM && op != CUCO_HOST_MAX && op != CUCO_HOST_MIN) return host_fail(c, "host collective %s: op %d is not sum, max or min", what, (int)op);
  if (root < -1 || root >= c->nranks) return host_fail(c, "host collective %s: root %d is not a rank of %d", what, root, c->nranks);
  const bool gets = root < 0 || root == c->rank;
  if (send == CUCO_HOST_IN_PLACE) send = recv;
  if (count && (!send || (gets && !recv))) return host_fail(c, "host collective %s: a null buffer", what);
  const size_t per = kHostChunk / es;
  unsigned char acc[kHostChunk];
  size_t done = 0;
  do {   // a count of 0 still takes one step: every rank's calls stay matched
    const size_t n = std::min(per, count - done);
    if (host_step(c, (const unsigned char*)send + done * es, n * es, what)) return 1;
    if (gets) {
      const unsigned long long s = c->step - 1;
      memcpy(acc, host_buf(c, 0, s), n * es);
      for (int r = 1; r < c->nranks; r++) host_combine_any(acc, host_buf(c, r, s), n, t, op);
      memcpy((unsigned char*)recv + done * es, acc, n * es);
    }
    done += n;
  } while (done < count);
  return 0;
}

extern "C" int cuco_host_allreduce(const void* sendbuf, void* recvbuf, size_t count, cuco_host_datatype datatype,
                                   cuco_host_op op, cuco_host_comm* comm) {
  return host_reduce_to(sendbuf, recvbuf, count, datatype, op, -1, comm, "allreduce");
}
extern "C" int cuco_host_reduce(const void* sendbuf, void* recvbuf, size_t count, cuco_host_datatype datatype,
                                cuco_host_op op, int root, cuco_host_comm* comm) {
  if (comm && (root < 0 || root >= comm->nranks)) return host_fail(comm, "host collective reduce: root %d is not a rank of %d", root, comm->nranks);
  return host_reduce_to(sendbuf, recvbuf, count, datatype, op, root, comm, "reduce");
}
extern "C" int cuco_host_bcast(void* buffer, size_t count, cuco_host_datatype datatype, int root, cuco_host_comm* comm) {
  if (host_check(comm, "bcast")) return 1;
  const size_t es = host_size(datatype);
  if (es == 0) return host_fail(comm, "host collective bcast: datatype %d is not byte, char, int, long long, float or double", (int)datatype);
  if (root < 0 || root >= comm->nranks) return host_fail(comm, "host collective bcast: root %d is not a rank of %d", root, comm->nranks);
  if (count && !buffer) return host_fail(comm, "host collective bcast: a null buffer");
  const size_t bytes = count * es;
  size_t done = 0;
  do {
    const size_t n = std::min(kHostChunk, bytes - done);
    const bool mine = comm->rank == root;
    if (host_step(comm, mine ? (unsigned char*)buffer + done : nullptr, mine ? n : 0, "bcast")) return 1;
    if (!mine) memcpy((unsigned char*)buffer + done, host_buf(comm, root, comm->step - 1), n);
    done += n;
  } while (done < bytes);
  return 0;
}
extern "C" int cuco_host_barrier(cuco_host_comm* comm) {
  if (host_check(comm, "barrier")) return 1;
  return host_step(comm, nullptr, 0, "barrier");
}
extern "C" const char* cuco_host_comm_error(const cuco_host_comm* comm) {
  return comm ? comm->error : "no host communicator";
}

// Launcher side: the memory shared by the ranks of one communicator, made before the fork (inherited across exec
// by its descriptor number; closed by the launcher once every rank exists).
static int host_comm_create(int nranks) {
  if (nranks < 1 || nranks > kHostMaxRanks) return -1;   // the rank child then says there is none
  int fd = (int)syscall(SYS_memfd_create, "cuco-host-comm", 0u);
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)(kHostSlot * nranks)) != 0) { close(fd); return -1; }
  return fd;
}
// Rank side: the shared memory mapped, its descriptor closed (nothing later can resize or re-map it).
static bool host_comm_attach(cuco_host_comm& c, int fd, int rank, int nranks, double timeout_s, std::string& err) {
  c.rank = rank; c.nranks = nranks; c.timeout_s = timeout_s;
  void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, kHostSlot * nranks, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd < 0) err = "the launcher could not create its shared memory (memfd_create)";
  else if (p == MAP_FAILED) err = std::string("mmap: ") + strerror(errno);
  if (fd >= 0) close(fd);
  if (p == MAP_FAILED) { snprintf(c.why, sizeof c.why, "%s", err.c_str()); return false; }
  c.base = (unsigned char*)p;
  return true;
}
static std::string host_comm_fds_arg(const int fds[3]) {
  return std::to_string(fds[0]) + "," + std::to_string(fds[1]) + "," + std::to_string(fds[2]);
}
static void host_comm_fds_parse(const std::string& a, int fds[3]) {
  if (sscanf(a.c_str(), "%d,%d,%d", &fds[0], &fds[1], &fds[2]) != 3) fds[0] = fds[1] = fds[2] = -1;
}

// `--self-test-host-comm R`: the launcher's path (the memory made, R ranks forked and exec'd) with no GPU:
// every collective's result checked on every rank, a rank that never arrives failing the other's call
// within the bound, and the per-call cost (an all-reduce of two doubles, a broadcast of one) printed by rank 0.
// Exit status 0 when every rank passed.
static int host_comm_test_rank(int rank, int nranks, const int fds[3]) {
  cuco_host_comm c, late; std::string err;
  if (!host_comm_attach(c, fds[0], rank, nranks, 10.0, err) || !host_comm_attach(late, fds[1], rank, nranks, 0.3, err)) {
    fprintf(stderr, "host-comm rank %d: %s\n", rank, err.c_str()); return 1;
  }
  int bad = 0;
  auto expect = [&](bool ok, const char* what) { if (!ok) { fprintf(stderr, "host-comm rank %d: FAIL %s (%s)\n", rank, what, c.error); bad++; } };
  const long long R = nranks;
  {   // sums, maxima and minima of each type, over several chunks
    const size_t n = 5000;
    std::vector<double> d(n), dr(n); std::vector<float> f(n), fr(n); std::vector<int> i4(n), ir(n); std::vector<long long> l(n), lr(n);
    for (size_t k = 0; k < n; k++) { d[k] = rank + 1 + 0.5 * k; f[k] = (float)(rank + 1); i4[k] = rank * 3 + (int)k; l[k] = (long long)rank << 33; }
    expect(cuco_host_allreduce(d.data(), dr.data(), n, CUCO_HOST_DOUBLE, CUCO_HOST_SUM, &c) == 0, "allreduce double sum");
    expect(cuco_host_allreduce(f.data(), fr.data(), n, CUCO_HOST_FLOAT, CUCO_HOST_MAX, &c) == 0, "allreduce float max");
    expect(cuco_host_allreduce(i4.data(), ir.data(), n, CUCO_HOST_INT, CUCO_HOST_MIN, &c) == 0, "allreduce int min");
    expect(cuco_host_allreduce(l.data(), lr.data(), n, CUCO_HOST_LONG_LONG, CUCO_HOST_SUM, &c) == 0, "allreduce long long sum");
    bool ok = true;
    for (size_t k = 0; k < n; k++) {
      ok = ok && dr[k] == R * (R + 1) / 2 + R * 0.5 * k && fr[k] == (float)R && ir[k] == (int)k && lr[k] == (R * (R - 1) / 2) << 33;
    }
    expect(ok, "allreduce values");
    double x = rank + 1;
    expect(cuco_host_allreduce(CUCO_HOST_IN_PLACE, &x, 1, CUCO_HOST_DOUBLE, CUCO_HOST_SUM, &c) == 0 && x == R * (R + 1) / 2, "allreduce in place");
  }
  {   // reduce to one root (the others' receive buffer untouched), broadcast from another
    const int root = (int)(1 % R);
    int mine = rank + 10, got = -7;
    expect(cuco_host_reduce(&mine, &got, 1, CUCO_HOST_INT, CUCO_HOST_MAX, root, &c) == 0, "reduce");
    expect(rank == root ? got == (int)R + 9 : got == -7, "reduce values");
    std::vector<unsigned char> b(20000);
    for (size_t k = 0; k < b.size(); k++) b[k] = rank == nranks - 1 ? (unsigned char)(k * 7) : 0;
    expect(cuco_host_bcast(b.data(), b.size(), CUCO_HOST_BYTE, nranks - 1, &c) == 0, "bcast");
    bool ok = true; for (size_t k = 0; k < b.size(); k++) ok = ok && b[k] == (unsigned char)(k * 7);
    expect(ok, "bcast values");
    expect(cuco_host_barrier(&c) == 0, "barrier");
  }
  {   // bad arguments: refused on every rank alike, the communicator still usable
    double v = 1;
    expect(cuco_host_allreduce(&v, &v, 1, CUCO_HOST_BYTE, CUCO_HOST_SUM, &c) != 0 && strstr(c.error, "cannot be reduced"), "byte reduction refused");
    expect(cuco_host_bcast(&v, 1, CUCO_HOST_DOUBLE, nranks, &c) != 0 && strstr(c.error, "root"), "bad root refused");
    expect(cuco_host_barrier(&c) == 0, "usable after refusals");
  }
  {   // the cost of one call: a one-element all-reduce, as a region's norm takes it; 20,000 calls, fewer
      // where they take longer than half a second (more processes than cores): rank 0 decides, and its
      // count travels with the sum, so every rank stops after the same call
    double v[2] = {(double)rank, 0}, s[2] = {0, 0};
    auto timed = [&](bool allreduce) {
      expect(cuco_host_barrier(&c) == 0, "barrier before timing");
      auto t0 = std::chrono::steady_clock::now();
      long long calls = 0;
      for (bool more = true; more; calls++) {
        v[1] = rank == 0 && (calls + 1 >= 20000 || std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(500));
        if (allreduce ? cuco_host_allreduce(v, s, 2, CUCO_HOST_DOUBLE, CUCO_HOST_SUM, &c)
                      : cuco_host_bcast(&v[1], 1, CUCO_HOST_DOUBLE, 0, &c)) { bad++; break; }
        more = (allreduce ? s[1] : v[1]) == 0;
      }
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / (double)calls;
    };
    double us = timed(true), bus = timed(false);
    // allreduce: two doubles (a value and the stop word); bcast: one double from rank 0
    if (rank == 0) printf("host-comm ranks=%d allreduce_us=%.2f bcast_us=%.2f\n", nranks, us, bus);
  }
  if (nranks > 1) {   // the last rank never makes its call: the others fail within the bound, then refuse
    if (rank != nranks - 1) {
      auto t0 = std::chrono::steady_clock::now();
      int rc = cuco_host_barrier(&late);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rc == 0 || !strstr(late.error, "did not arrive") || s > 5) { fprintf(stderr, "host-comm rank %d: FAIL no timeout (%s)\n", rank, late.error); bad++; }
      else if (rank == 0) printf("host-comm timeout: %s\n", late.error);
      if (cuco_host_barrier(&late) == 0 || !strstr(late.error, "refused")) { fprintf(stderr, "host-comm rank %d: FAIL used after a timeout\n", rank); bad++; }
    }
  }
  return bad ? 1 : 0;
}

static int self_test_host_comm(const std::string& self, int nranks) {
  int fds[3] = {host_comm_create(nranks), host_comm_create(nranks), -1};
  if (fds[0] < 0 || fds[1] < 0) { fprintf(stderr, "host-comm: cannot create the shared memory for %d ranks\n", nranks); return 2; }
  std::vector<pid_t> pids;
  const std::string rs = std::to_string(nranks), fa = host_comm_fds_arg(fds);
  fflush(stdout);
  for (int r = 0; r < nranks; r++) {
    pid_t p = fork();
    if (p == 0) {
      std::string me = std::to_string(r);
      const char* argv[] = {self.c_str(), "--host-comm-test-rank", me.c_str(), "--ranks", rs.c_str(), "--host-comm", fa.c_str(), nullptr};
      execv("/proc/self/exe", (char* const*)argv);
      _exit(127);
    }
    pids.push_back(p);
  }
  close(fds[0]); close(fds[1]);
  int failed = 0;
  for (pid_t p : pids) { int st = 0; waitpid(p, &st, 0); if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) failed++; }
  printf("host-comm ranks=%d %s\n", nranks, failed ? "FAILED" : "passed");
  return failed ? 1 : 0;
}

struct ChildState {
  Spec spec; int rank = 0, nranks = 0;
  ncclComm_t comm = nullptr, hcomm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  void* flush = nullptr; size_t flush_bytes = 256ull << 20;
  int* align_buf = nullptr;
  unsigned* timeout_flag = nullptr;
  cuco_ctx* start = nullptr;   // the baseline's context, for cuco_baseline_start_outputs (null: none)
  cuco_host_comm host_comm[3];  // the candidate's, the baseline's, the verification's reference run's
};

// Optional, in a workload made by `cuco init` from a program whose region carries buffers from one iteration
// to the next (a ping-pong): the frozen baseline sets those outputs to the program's own starting value.
// Called after the poisoning and before every call, the candidate's and the baseline's alike, outside the
// timing: the program sets them once before its timed loop, so a timed call measures the iteration alone.
// Frozen code (the baseline's translation unit): a candidate cannot run work in it.
extern "C" int cuco_baseline_start_outputs(cuco_ctx* ctx) __attribute__((weak));

static bool start_outputs(ChildState& st, std::string& err) {
  if (cuco_baseline_start_outputs == nullptr || st.start == nullptr) return true;
  st.start->error[0] = 0;
  if (cuco_baseline_start_outputs(st.start) != 0) {
    err = std::string("the baseline's start_outputs failed: ") + st.start->error;
    return false;
  }
  return true;
}

// Which of baseline and candidate a benchmark iteration times first: drawn from the job's seed for each pair
// of iterations, the pair's second iteration the other way. No pattern to fall into step with, and each side
// first in half of any whole number of pairs: a position effect then moves both alike, where an unbalanced
// draw (10 of 15 one way) would hand it to one side.
static bool order_bit(unsigned long long seed, int it) {
  unsigned long long z = seed * 0x9E3779B97F4A7C15ULL + (unsigned long long)(it / 2) * 0xD1B54A32D192ED03ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (((z ^ (z >> 31)) >> 17) & 1) ^ (unsigned long long)(it & 1);
}

// The 95 % interval of the median of per-iteration ratios, by order statistics: no assumption on the noise's
// shape, and a burst that hits a few iterations moves neither end much. [x(k), x(n+1-k)] for the largest k
// whose binomial tail P(Bin(n, 1/2) < k) stays within 2.5 %; below 6 iterations it is the whole range.
static void ratio_interval(std::vector<double> v, double* lo, double* hi) {
  std::sort(v.begin(), v.end());
  const int n = (int)v.size();
  if (n == 0) { *lo = *hi = NAN; return; }
  double cdf = 0, term = std::pow(0.5, n);
  int k = 0;
  for (int j = 0; j < n; j++) { cdf += term; if (cdf > 0.025) break; k = j + 1; term = term * (n - j) / (j + 1); }
  *lo = v[std::max(0, k - 1)];
  *hi = v[n - std::max(1, k)];
}
static double median_exact(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ------------------------------------------------------------------------------------------------
// The stream memory operations the ABI offers (cuco_abi.h): the driver's, looked up here before any
// candidate code runs, so that a candidate never needs a driver entry point of its own.
// ------------------------------------------------------------------------------------------------
static PFN_cuStreamWaitValue32_v11070 g_wait_value32 = nullptr;
static PFN_cuStreamWriteValue32_v11070 g_write_value32 = nullptr;
static void lookup_stream_memops() {
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void**)&g_wait_value32, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) g_wait_value32 = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void**)&g_write_value32, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) g_write_value32 = nullptr;
  (void)cudaGetLastError();
}
extern "C" CUresult cuco_stream_wait_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return g_wait_value32 ? g_wait_value32(stream, addr, value, flags) : CUDA_ERROR_NOT_SUPPORTED;
}
extern "C" CUresult cuco_stream_write_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return g_write_value32 ? g_write_value32(stream, addr, value, flags) : CUDA_ERROR_NOT_SUPPORTED;
}

// ------------------------------------------------------------------------------------------------
// Host threads. A thread a candidate starts could wait for a call's kernels and launch the rest of its
// work after the clock stopped (during the checks, or the next call). The kernel's list of this process's
// threads (/proc/self/task), never a count the candidate could write: a thread a call started must have
// ended before the call's end event is recorded (the harness waits for it, up to 2 s, on the clock); one
// still running then fails the call. Threads of the CUDA runtime and NCCL (named "cuda..." and "NCCL ...")
// may outlive a call or cuco_candidate_setup: they start lazily, and a candidate cannot name a thread (the
// symbol policy refuses prctl, pthread_setname_np and files).
// ------------------------------------------------------------------------------------------------
static std::set<long> thread_ids() {
  std::set<long> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) if (e->d_name[0] != '.') ids.insert(strtol(e->d_name, nullptr, 10));
    closedir(d);
  }
  return ids;
}
static std::string thread_name(long tid) {
  char path[64]; snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
  char buf[32] = "";
  if (FILE* f = fopen(path, "r")) { if (!fgets(buf, sizeof buf, f)) buf[0] = 0; fclose(f); }
  std::string n = buf; while (!n.empty() && (n.back() == '\n' || n.back() == ' ')) n.pop_back();
  return n;
}
static bool runtime_thread(const std::string& name) {
  return name.rfind("cuda", 0) == 0 || name.rfind("NCCL", 0) == 0 || name.rfind("cupti", 0) == 0;
}
// The threads started since `before` that are still running and are not the runtime's, after waiting up to
// `wait_s` for them to end: "" when none, else what to say.
static std::string threads_left(const std::set<long>& before, double wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (;;) {
    std::vector<std::string> left;
    for (long t : thread_ids())
      if (!before.count(t)) {
        std::string n = thread_name(t);
        if (!n.empty() && !runtime_thread(n)) left.push_back(n);
      }
    if (left.empty()) return "";
    if (std::chrono::steady_clock::now() > deadline) {
      std::string o = std::to_string(left.size()) + " thread(s) it started still running " + std::to_string((int)wait_s) + " s later (";
      for (size_t i = 0; i < left.size() && i < 4; i++) o += (i ? ", " : "") + left[i];
      return o + "): a candidate's threads must end before it returns";
    }
    usleep(50);
  }
}

static void align_ranks(ChildState& st) {
  CKN(ncclAllReduce(st.align_buf, st.align_buf + 1, 1, ncclInt32, ncclSum, st.hcomm, st.stream));
}

static void poison_outputs(ChildState& st, cuco_ctx& ctx) {
  for (int i = 0; i < ctx.noutputs; i++) CKC(cudaMemsetAsync(ctx.outputs[i].ptr, 0xFF, ctx.outputs[i].bytes, st.stream));
}

// One call of impl.run with poisoning, L2 flush, alignment, timing. Returns false on a call failure.
static bool timed_call(ChildState& st, cuco_ctx& ctx, int (*run)(cuco_ctx*), bool flush,
                       float* ev_ms, double* host_ms, std::string& err, bool check_threads) {
  poison_outputs(st, ctx);
  if (!start_outputs(st, err)) return false;
  if (flush) { CKC(cudaMemsetAsync(st.flush, 0, st.flush_bytes, st.stream)); cudaCtxResetPersistingL2Cache(); }
  CKC(cudaMemsetAsync(st.timeout_flag, 0, 4, st.stream));
  align_ranks(st);
  CKC(cudaStreamSynchronize(st.stream));
  align_ranks(st);  // all ranks now arrive within host skew; this one aligns them on the GPU
  const std::set<long> threads_before = thread_ids();
  double h0 = now_ms();
  CKC(cudaEventRecord(st.e0, st.stream));
  ctx.error[0] = 0;
  ctx.iteration++;  // each call its own index (from -1: the first call is 0); verify's reference reads it
  int rc = run(&ctx);
  // on the clock: threads the call started end before its end event (the baseline's calls pay the same look,
  // and are not failed by it: the frozen code starts none of its own)
  std::string left = threads_left(threads_before, check_threads ? 2.0 : 0.0);
  if (check_threads && !left.empty()) { err = "cuco_run returned while " + left; return false; }
  CKC(cudaEventRecord(st.e1, st.stream));
  cudaError_t se = cudaDeviceSynchronize();
  double h1 = now_ms();
  if (rc != 0) {
    err = std::string("run returned ") + std::to_string(rc) + (ctx.error[0] ? std::string(": ") + ctx.error : "");
    if (ctx.host_comm && ctx.host_comm->error[0]) err += std::string(" (") + ctx.host_comm->error + ")";
    return false;
  }
  if (se != cudaSuccess) { err = std::string("CUDA error after run: ") + cudaGetErrorString(se); return false; }
  cudaError_t le = cudaGetLastError();
  if (le != cudaSuccess) { err = std::string("CUDA error after run: ") + cudaGetErrorString(le); return false; }
  unsigned tf = 0; CKC(cudaMemcpy(&tf, st.timeout_flag, 4, cudaMemcpyDeviceToHost));
  if (tf) { err = "spin-wait timeout: a bounded device wait expired (ctx->timeout_flag raised)"; return false; }
  float ms = 0; CKC(cudaEventElapsedTime(&ms, st.e0, st.e1));
  if (ev_ms) *ev_ms = ms;
  if (host_ms) *host_ms = h1 - h0;
  return true;
}

// ------------------------------------------------------------------------------------------------
// Where the time goes: CUPTI activity records (kernels, memcpy incl. peer copies, memset) of ONE
// profiled call per config, after the timed loop (never a timed call). libcupti is loaded with dlopen,
// so a node without it builds and benchmarks as before and reports "no timeline: <why>". Its records
// are written as `tl*` lines and turned into the config's "timeline" by the parent (one time base: the
// node's, CUPTI's timestamps). The candidate's calls are told apart by time: everything recorded between
// the host's start (after the alignment, synchronised) and the device-wide synchronize after the call.
// ------------------------------------------------------------------------------------------------
#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <mutex>
namespace cuco_tl {
struct Api {
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*register_cb)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*flush)(uint32_t);
  CUptiResult (*next)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*timestamp)(uint64_t*);
};
struct Ev { char kind; uint32_t stream; uint64_t t0, t1, bytes; int copy; std::string name; };
constexpr size_t kMaxEvents = 20000;
constexpr size_t kBufBytes = 8u << 20;
static Api g_api; static bool g_loaded = false; static std::string g_why;
static std::mutex g_mu; static std::vector<Ev> g_evs; static size_t g_dropped = 0;

static bool load() {
  if (g_loaded || !g_why.empty()) return g_loaded;
  std::vector<std::string> names = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* h = getenv(env))
      for (const char* sub : {"/extras/CUPTI/lib64", "/lib64", "/lib", "/targets/x86_64-linux/lib"})
        names.push_back(std::string(h) + sub + "/libcupti.so");
  for (const char* dir : {"/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                          "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"})
    names.push_back(std::string(dir) + "/libcupti.so");
  void* h = nullptr; std::string last;
  for (auto& n : names) { if ((h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break; const char* e = dlerror(); if (e) last = e; }
  if (!h) { g_why = "libcupti not found (" + last + "); install the CUDA toolkit's CUPTI or set CUDA_HOME"; return false; }
  auto sym = [&](const char* s) { void* p = dlsym(h, s); if (!p && g_why.empty()) g_why = std::string("libcupti lacks ") + s; return p; };
  g_api.enable = (CUptiResult (*)(CUpti_ActivityKind))sym("cuptiActivityEnable");
  g_api.disable = (CUptiResult (*)(CUpti_ActivityKind))sym("cuptiActivityDisable");
  g_api.register_cb = (CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc))sym("cuptiActivityRegisterCallbacks");
  g_api.flush = (CUptiResult (*)(uint32_t))sym("cuptiActivityFlushAll");
  g_api.next = (CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**))sym("cuptiActivityGetNextRecord");
  g_api.timestamp = (CUptiResult (*)(uint64_t*))sym("cuptiGetTimestamp");
  return g_loaded = g_why.empty();
}
static void CUPTIAPI requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *buf = (uint8_t*)aligned_alloc(8, kBufBytes); *size = *buf ? kBufBytes : 0; *max_records = 0;
}
static std::string demangle(const char* n) {
  if (!n) return "?";
  int status = 0; char* d = abi::__cxa_demangle(n, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : n; free(d);
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  if (s.compare(0, 5, "void ") == 0) s.erase(0, 5);   // the return type
  int depth = 0;   // the name without its parameter list: the first '(' outside template arguments
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '<') depth++;
    else if (s[i] == '>') depth--;
    else if (s[i] == '(' && depth == 0 && i > 0) { s.resize(i); break; }
  }
  return s.size() > 160 ? s.substr(0, 160) : s;
}
static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> g(g_mu);
  while (g_api.next(buf, valid, &r) == CUPTI_SUCCESS) {
    Ev e{0, 0, 0, 0, 0, 0, ""};
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto* k = (CUpti_ActivityKernel10*)r; e = {'k', k->streamId, k->start, k->end, 0, 0, demangle(k->name)};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto* m = (CUpti_ActivityMemcpy6*)r; e = {'c', m->streamId, m->start, m->end, m->bytes, (int)m->copyKind, ""};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY2) {
      auto* m = (CUpti_ActivityMemcpyPtoP4*)r; e = {'c', m->streamId, m->start, m->end, m->bytes, (int)m->copyKind, ""};
    } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      auto* m = (CUpti_ActivityMemset4*)r; e = {'s', m->streamId, m->start, m->end, m->bytes, 0, ""};
    } else continue;
    if (g_evs.size() < kMaxEvents) g_evs.push_back(e); else g_dropped++;
  }
  free(buf);
}
static const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                            CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};
static bool begin(uint64_t* t0) {
  if (!load()) return false;
  static bool registered = false;
  if (!registered && g_api.register_cb(requested, completed) != CUPTI_SUCCESS) { g_why = "cuptiActivityRegisterCallbacks failed"; return false; }
  registered = true;
  { std::lock_guard<std::mutex> g(g_mu); g_evs.clear(); g_dropped = 0; }
  for (auto k : kKinds) if (g_api.enable(k) != CUPTI_SUCCESS) { g_why = "cuptiActivityEnable failed (another profiler attached?)"; return false; }
  return g_api.timestamp(t0) == CUPTI_SUCCESS;
}
static void end(uint64_t* t1) {
  g_api.timestamp(t1);
  g_api.flush(1);
  for (auto k : kKinds) g_api.disable(k);
}
static const char* copy_name(int k) {
  switch (k) { case 1: return "HtoD"; case 2: return "DtoH"; case 8: return "DtoD"; case 9: return "HtoH"; case 10: return "PtoP"; default: return "other"; }
}
}  // namespace cuco_tl
#endif

// The profiled call: poisoned outputs and aligned ranks as for a timed call, then the candidate alone under
// CUPTI. A failing call fails the rank as any call does; a CUPTI that cannot record leaves "no timeline".
// With CUPTI on, a kernel's first launch costs the host milliseconds (seen on an H100: 4-6 ms before the
// GEMM of every shipped gemm_allgather source), which would show as idle: one call under CUPTI goes first,
// unrecorded (its records end before the recorded call's start and are dropped).
#if !__has_include(<cupti_activity.h>)
namespace cuco_tl { static bool begin(uint64_t*) { return false; } static void end(uint64_t*) {} }
#endif
// One call prepared as a timed call is (outputs poisoned, ranks aligned, the stream synchronised); with
// `record`, CUPTI's window opens right before the candidate runs and closes after the device-wide sync.
static void profiled_run(ChildState& st, cuco_ctx& ctx, int (*run)(cuco_ctx*), const std::string& config,
                         bool record, bool* on, uint64_t* t0, uint64_t* t1) {
  poison_outputs(st, ctx);
  std::string start_err;
  if (!start_outputs(st, start_err)) {
    rec("fail\t%s\t%s", config.c_str(), clean("candidate (profiled call after timing): " + start_err).c_str());
    _exit(4);
  }
  CKC(cudaMemsetAsync(st.timeout_flag, 0, 4, st.stream));
  align_ranks(st);
  CKC(cudaStreamSynchronize(st.stream));
  if (record) *on = cuco_tl::begin(t0);   // records cleared; CUPTI stays on
  ctx.error[0] = 0;
  ctx.iteration++;  // each call its own index (from -1: the first call is 0); verify's reference reads it
  int rc = run(&ctx);
  cudaError_t se = cudaDeviceSynchronize();
  if (record && *on) cuco_tl::end(t1);
  unsigned tf = 0;
  if (rc == 0 && se == cudaSuccess) CKC(cudaMemcpy(&tf, st.timeout_flag, 4, cudaMemcpyDeviceToHost));
  if (rc != 0 || se != cudaSuccess || tf) {
    std::string e = rc ? "run returned " + std::to_string(rc) : se != cudaSuccess ? std::string("CUDA error after run: ") + cudaGetErrorString(se) : "spin-wait timeout";
    rec("fail\t%s\t%s", config.c_str(), clean("candidate (profiled call after timing): " + e).c_str());
    _exit(4);
  }
}
static void profiled_call(ChildState& st, cuco_ctx& ctx, int (*run)(cuco_ctx*), const std::string& config) {
  uint64_t t0 = 0, t1 = 0;
  bool on = false;
  if (cuco_tl::begin(&t0)) profiled_run(st, ctx, run, config, false, &on, &t0, &t1);   // the unrecorded first call
  profiled_run(st, ctx, run, config, true, &on, &t0, &t1);
#if __has_include(<cupti_activity.h>)
  if (!on) { rec("tlerr\t%s\t%s", config.c_str(), clean("no timeline: " + cuco_tl::g_why).c_str()); return; }
  std::lock_guard<std::mutex> g(cuco_tl::g_mu);
  rec("tlrank\t%s\t%llu\t%llu\t%zu", config.c_str(), (unsigned long long)t0, (unsigned long long)t1, cuco_tl::g_dropped);
  for (auto& e : cuco_tl::g_evs) {
    if (e.t1 < t0 || e.t0 > t1) continue;   // the harness's own work (and the first call) before the window
    rec("tlev\t%s\t%s\t%u\t%llu\t%llu\t%llu\t%s\t%s", config.c_str(), e.kind == 'k' ? "kernel" : e.kind == 'c' ? "memcpy" : "memset",
        e.stream, (unsigned long long)e.t0, (unsigned long long)e.t1, (unsigned long long)e.bytes,
        e.kind == 'c' ? cuco_tl::copy_name(e.copy) : "-", clean(e.name).c_str());
  }
#else
  rec("tlerr\t%s\tno timeline: built without CUPTI's headers (cupti_activity.h)", config.c_str());
#endif
}

// The parent's side: each rank's `tl*` lines of one config -> the config's "timeline" JSON (times in us
// from the earliest rank's start), or its "timeline_error".
struct TimelineParts {
  std::string error; std::string events; size_t nevents = 0, dropped = 0;
  std::vector<std::pair<int, std::pair<double, double>>> ranks;   // rank, (start ns, end ns)
  std::vector<std::pair<int, std::vector<std::string>>> lines;    // rank, tlev fields
};
static void timeline_line(TimelineParts& tp, int rank, const std::vector<std::string>& l) {
  if (l[0] == "tlerr" && l.size() >= 3) { if (tp.error.empty()) tp.error = "rank " + std::to_string(rank) + ": " + l[2]; }
  else if (l[0] == "tlrank" && l.size() >= 5) {
    tp.ranks.push_back({rank, {strtod(l[2].c_str(), nullptr), strtod(l[3].c_str(), nullptr)}});
    tp.dropped += strtoull(l[4].c_str(), nullptr, 10);
  } else if (l[0] == "tlev" && l.size() >= 9) tp.lines.push_back({rank, l});
}
static void timeline_json(const TimelineParts& tp, size_t nranks, ConfigResult& c) {
  if (!tp.error.empty()) { c.timeline_error = tp.error; return; }
  if (tp.ranks.empty()) return;   // not profiled (verify mode, or the spec turned it off)
  if (tp.ranks.size() != nranks) { c.timeline_error = "no timeline: only " + std::to_string(tp.ranks.size()) + " rank(s) recorded one"; return; }
  double base = tp.ranks[0].second.first;
  for (auto& r : tp.ranks) base = std::min(base, r.second.first);
  auto us = [&](double ns) { return jnum((ns - base) / 1e3); };
  std::string o = "{\"source\": \"cupti\", \"unit\": \"us\", \"dropped\": " + std::to_string(tp.dropped) + ", \"ranks\": [";
  for (size_t i = 0; i < tp.ranks.size(); i++)
    o += std::string(i ? ", " : "") + "{\"rank\": " + std::to_string(tp.ranks[i].first) + ", \"start\": " +
         us(tp.ranks[i].second.first) + ", \"end\": " + us(tp.ranks[i].second.second) + "}";
  o += "], \"events\": [";
  for (size_t i = 0; i < tp.lines.size(); i++) {
    const auto& l = tp.lines[i].second;
    o += std::string(i ? ", " : "") + "{\"k\": " + jstr(l[2]) + ", \"rank\": " + std::to_string(tp.lines[i].first) +
         ", \"stream\": " + std::to_string(strtoull(l[3].c_str(), nullptr, 10)) + ", \"t0\": " + us(strtod(l[4].c_str(), nullptr)) + ", \"t1\": " +
         us(strtod(l[5].c_str(), nullptr)) + ", \"bytes\": " + std::to_string(strtoull(l[6].c_str(), nullptr, 10)) + (l[7] != "-" ? ", \"copy\": " + jstr(l[7]) : "") +
         (l[8].empty() ? "" : ", \"name\": " + jstr(l[8])) + "}";
  }
  c.timeline = o + "]}";
}

static void run_child(int rank, const std::string& spec_path, const std::string& iddir, const std::string& outpath,
                      const int host_fds[3]) {
  g_rank = rank;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Lazy module loading would load a kernel at its first launch, which waits for the device: a kernel
  // that spins on a flag raised by a not-yet-loaded kernel would then deadlock. Load everything up front.
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  // NCCL names its threads ("NCCL ...") only when asked: the per-call thread check tells them from a
  // candidate's by name (a thread otherwise takes the process's)
  setenv("NCCL_SET_THREAD_NAME", "1", 1);
  g_out = fopen(outpath.c_str(), "w");
  if (!g_out) { fprintf(stderr, "[rank %d] cannot write %s\n", rank, outpath.c_str()); _exit(3); }
  ChildState st; std::string err;
  if (!parse_spec(spec_path, st.spec, err)) child_fatal(err);
  st.rank = rank; st.nranks = st.spec.ranks;
  // a rank late to a host collective by more than this fails the call (a rank that never comes: the job)
  const double host_wait_s = std::max(10.0, st.spec.spin_timeout_ms / 1000.0);
  for (int side = 0; side < 3; side++) {
    std::string why;
    if (!host_comm_attach(st.host_comm[side], host_fds[side], rank, st.nranks, host_wait_s, why))
      fprintf(stderr, "[rank %d] no host communicator: %s\n", rank, why.c_str());
  }
  int ndev = 0; CKC(cudaGetDeviceCount(&ndev));
  if (ndev < st.nranks) child_fatal("job needs " + std::to_string(st.nranks) + " GPUs, " + std::to_string(ndev) + " visible");
  CKC(cudaSetDevice(rank));
  cudaDeviceProp prop; CKC(cudaGetDeviceProperties(&prop, rank));
  lookup_stream_memops();

  // NCCL unique id through a file (rank 0 writes it, atomically renamed; the others poll, bounded).
  ncclUniqueId id;
  std::string idfile = iddir + "/ncclid";
  if (rank == 0) {
    CKN(ncclGetUniqueId(&id));
    std::string tmp = idfile + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb"); if (!f) child_fatal("cannot write " + tmp);
    fwrite(&id, sizeof id, 1, f); fclose(f);
    if (rename(tmp.c_str(), idfile.c_str()) != 0) child_fatal("cannot rename id file");
  } else {
    FILE* f = nullptr;
    for (int t = 0; t < 1200 && !(f = fopen(idfile.c_str(), "rb")); t++) usleep(50000);
    if (!f) child_fatal("no NCCL id from rank 0 within 60 s");
    if (fread(&id, sizeof id, 1, f) != 1) child_fatal("short NCCL id file");
    fclose(f);
  }
  CKN(ncclCommInitRank(&st.comm, st.nranks, id, rank));
  int ver = 0; CKN(ncclGetVersion(&ver));
  if (ver != NCCL_VERSION_CODE)
    child_fatal("NCCL library " + std::to_string(ver) + " != headers " + std::to_string(NCCL_VERSION_CODE) + ": build and run against the same nvidia-nccl-cu13 wheel");
  CKN(ncclCommSplit(st.comm, 0, rank, &st.hcomm, nullptr));
  int drv = 0, rt = 0; cudaDriverGetVersion(&drv); cudaRuntimeGetVersion(&rt);
  rec("env\tgpu\t%s", prop.name);
  rec("env\tdriver\t%d", drv);
  rec("env\tcuda_runtime\t%d", rt);
  rec("env\tnccl\t%d", ver);
  rec("env\tsm_count\t%d", prop.multiProcessorCount);
  { char h[256] = {0}; gethostname(h, sizeof h - 1); rec("env\thost\t%s", h); }

  CKC(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  CKC(cudaEventCreate(&st.e0)); CKC(cudaEventCreate(&st.e1));
  CKC(cudaMalloc(&st.flush, st.flush_bytes));
  CKC(cudaMalloc(&st.align_buf, 2 * sizeof(int))); CKC(cudaMemset(st.align_buf, 0, 2 * sizeof(int)));
  CKC(cudaMalloc(&st.timeout_flag, 4)); CKC(cudaMemset(st.timeout_flag, 0, 4));
  CKC(cudaMalloc(&g_scratch64, 8));
  // warm up the harness communicator (lazy connection) before anything is timed
  align_ranks(st); CKC(cudaStreamSynchronize(st.stream));

  Impl cand{"candidate", cuco_candidate_setup, cuco_candidate_run, cuco_candidate_teardown};
  Impl base{"baseline", cuco_baseline_setup, cuco_baseline_run, cuco_baseline_teardown};
  const bool bench = st.spec.mode == "benchmark";

  for (size_t ci = 0; ci < st.spec.configs.size(); ci++) {
    const SpecConfig& sc = st.spec.configs[ci];
    long long want = cfg_param(sc, "ranks", 0);
    if (want != 0 && want != st.nranks) { rec("skip\t%s\tconfig is for %lld ranks", sc.name.c_str(), want); continue; }
    rec("begin\t%s", sc.name.c_str());
    cuco_ctx ctx; memset(&ctx, 0, sizeof ctx);
    ctx.abi_version = CUCO_ABI_VERSION; ctx.rank = rank; ctx.nranks = st.nranks; ctx.device = rank;
    ctx.iteration = -1;  // timed_call counts the calls of each side from 0
    ctx.comm = st.comm; ctx.stream = st.stream; ctx.sm_count = prop.multiProcessorCount;
    ctx.nparams = (int)sc.params.size();
    for (int i = 0; i < ctx.nparams; i++) { ctx.params[i].name = sc.params[i].first.c_str(); ctx.params[i].value = sc.params[i].second; }
    ctx.spin_timeout_ns = (unsigned long long)(st.spec.spin_timeout_ms * 1e6);
    ctx.timeout_flag = st.timeout_flag;
    ctx.host_comm = &st.host_comm[0];

    cuco_problem pb; memset(&pb, 0, sizeof pb);
    if (cuco_problem_describe(&ctx, &pb) != 0) {
      rec("cfgerror\t%s\tunsupported config: %s", sc.name.c_str(), clean(pb.error).c_str()); continue;
    }
    double tol = 1.6e-2;
    if (pb.dtype && st.spec.tol.count(pb.dtype)) tol = st.spec.tol[pb.dtype];
    std::vector<void*> pristine(pb.ninputs, nullptr);
    ctx.ninputs = pb.ninputs; ctx.noutputs = pb.noutputs;
    for (int i = 0; i < pb.ninputs; i++) {
      cuco_buffer& b = ctx.inputs[i]; b.name = pb.input_names[i]; b.bytes = pb.input_bytes[i];
      CKN(ncclMemAlloc(&b.ptr, b.bytes));
      CKN(ncclCommWindowRegister(st.comm, b.ptr, b.bytes, &b.win, NCCL_WIN_COLL_SYMMETRIC));
      CKC(cudaMalloc(&pristine[i], b.bytes));
    }
    for (int i = 0; i < pb.noutputs; i++) {
      cuco_buffer& b = ctx.outputs[i]; b.name = pb.output_names[i]; b.bytes = pb.output_bytes[i];
      CKN(ncclMemAlloc(&b.ptr, b.bytes));
      CKN(ncclCommWindowRegister(st.comm, b.ptr, b.bytes, &b.win, NCCL_WIN_COLL_SYMMETRIC));
    }
    (void)cudaGetLastError();
    auto load_inputs = [&](unsigned long long seed) {
      if (cuco_problem_make_inputs(&ctx, pristine.data(), seed, st.stream) != 0) child_fatal("make_inputs failed");
      for (int i = 0; i < pb.ninputs; i++) CKC(cudaMemcpyAsync(ctx.inputs[i].ptr, pristine[i], ctx.inputs[i].bytes, cudaMemcpyDeviceToDevice, st.stream));
      CKC(cudaStreamSynchronize(st.stream));
    };
    unsigned long long seed = st.spec.seed * 1000003ULL + ci * 7919ULL;
    load_inputs(seed);

    // setup: candidate then baseline, each with its own state
    cuco_ctx cctx = ctx, bctx = ctx;
    bctx.host_comm = &st.host_comm[1];
    std::string cfg_err; bool ok = true;
    const std::set<long> threads_before_setup = thread_ids();
    if (!g_candidate_ran) rec("candidate\t%s", sc.name.c_str());   // from here on, lines may be the candidate's
    g_candidate_ran = true;
    if (cand.setup(&cctx) != 0) {  // its peers may be blocked in a collective setup call: end this rank now
      rec("fail\t%s\t%s", sc.name.c_str(), clean(std::string("candidate setup failed: ") + cctx.error).c_str());
      _exit(4);
    }
    // a thread setup left running would outlive every call's clock
    std::string setup_left = threads_left(threads_before_setup, 2.0);
    if (!setup_left.empty()) {
      rec("fail\t%s\t%s", sc.name.c_str(), clean("candidate setup returned while " + setup_left).c_str());
      _exit(4);
    }
    (void)cudaGetLastError();
    if (base.setup(&bctx) != 0) child_fatal(std::string("baseline setup failed: ") + bctx.error);
    (void)cudaGetLastError();
    st.start = &bctx;
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);

    cuco_mismatch mm; memset(&mm, 0, sizeof mm);
    auto check_inputs = [&](const char* who) -> bool {
      for (int i = 0; i < pb.ninputs; i++) {
        long long d = cuco_h_first_diff_u16(ctx.inputs[i].ptr, pristine[i], ctx.inputs[i].bytes / 2, st.stream, nullptr, nullptr);
        if (d >= 0) { cfg_err = std::string(who) + " modified input " + ctx.inputs[i].name + " at element " + std::to_string(d); return false; }
      }
      return true;
    };
    // in_loop: a benchmark loop's call, checked by the problem's sampled check (verify_sample) or its cheaper
    // complete check (cuco_problem_verify_call) where it has one, else by its full verify
    auto verify = [&](cuco_ctx& c, const char* who, bool in_loop = false) -> bool {
      memset(&mm, 0, sizeof mm);
      auto check = in_loop && cuco_problem_verify_call ? cuco_problem_verify_call : cuco_problem_verify;
      // the problem's reference run takes its host collectives through a communicator of its own: a
      // peer's candidate, still in its call, cannot feed the reference what it reduces
      cuco_ctx vc = c; vc.host_comm = &st.host_comm[2];
      // every rank must reach the collective verify, so failures are combined after it
      int vrc = in_loop && pb.verify_sample
                    ? pb.verify_sample(&vc, pristine.data(), st.hcomm, st.stream, tol, draw_sample_seed(), &mm)
                    : check(&vc, pristine.data(), st.hcomm, st.stream, tol, &mm);
      if (vrc != 0) child_fatal("verify failed internally");
      if (mm.found) {
        rec("mismatch\t%s\t%s\t%lld\t%.9g\t%.9g\t%s\t%s", sc.name.c_str(), who, mm.index, mm.expected, mm.got, mm.what, mm.buffer);
        return false;
      }
      return check_inputs(who);
    };
    // Every rank runs every step (collectives inside); a failure on one rank is recorded and the rank
    // keeps stepping with the others, and the parent combines. A rank that cannot go on exits; the
    // parent then kills the others.
    // A failing call (error return, CUDA error, expired spin-wait) ends this rank at once: its peers may
    // be blocked inside the candidate's own collectives, and the parent kills them when a rank exits.
    auto call = [&](cuco_ctx& c, int (*run)(cuco_ctx*), const char* who, bool flush, float* ev, double* host) {
      std::string e;
      if (!timed_call(st, c, run, flush, ev, host, e, run == cand.run)) {
        rec("fail\t%s\t%s", sc.name.c_str(), clean(std::string(who) + ": " + e).c_str());
        fprintf(stderr, "[rank %d] %s: %s\n", rank, who, e.c_str());
        _exit(4);
      }
    };
    // did any rank fail so far? (an all-reduce on the harness communicator; every rank calls it)
    auto any_rank_failed = [&](bool mine) -> bool {
      int* f = st.align_buf;
      int v = mine ? 1 : 0, r = 0;
      CKC(cudaMemcpy(f, &v, 4, cudaMemcpyHostToDevice));
      CKN(ncclAllReduce(f, f + 1, 1, ncclInt32, ncclMax, st.hcomm, st.stream));
      CKC(cudaStreamSynchronize(st.stream));
      CKC(cudaMemcpy(&r, f + 1, 4, cudaMemcpyDeviceToHost));
      CKC(cudaMemset(st.align_buf, 0, 2 * sizeof(int)));
      return r != 0;
    };

    // verification: candidate, baseline (the reference implementation), candidate -- every rank verifies
    call(cctx, cand.run, "candidate", false, nullptr, nullptr);
    bool v1 = verify(cctx, "candidate");
    call(bctx, base.run, "baseline", false, nullptr, nullptr);
    if (!verify(bctx, "baseline")) child_fatal("the frozen baseline failed verification on config " + sc.name + ": " + cfg_err);
    call(cctx, cand.run, "candidate", false, nullptr, nullptr);
    bool v2 = verify(cctx, "candidate");
    bool cand_ok = v1 && v2;
    bool all_ok = !any_rank_failed(!cand_ok);
    if (all_ok && bench) {
      std::vector<float> tb, tc, tcomp, tcomm, first; std::vector<double> hb, hc, ratios;
      float* slowest = nullptr;   // this iteration's two times, all-reduced to the max over ranks
      CKC(cudaMalloc(&slowest, 4 * sizeof(float)));
      // A random number of warm-ups (as asked, or one more; the same on every rank): from the job's seed,
      // which the candidate never sees. Timing begins at no fixed call.
      const int warmups = st.spec.warmup + (int)((st.spec.seed >> 11) & 1);
      double check_ms = 0;   // fresh inputs and the per-call verification, all untimed
      bool timed_ok = true;
      for (int it = 0; it < warmups + st.spec.max_iters; it++) {
        float a = 0, b = 0, c = 0, d = 0; double ha = 0, hcd = 0, dummy = 0;
        double c0 = now_ms();
        // fresh inputs for every iteration (and between verification and timing): a saved answer is worthless
        load_inputs(seed ^ 0x5DEECE66DULL ^ ((unsigned long long)(it + 1) * 0x9E3779B97F4A7C15ULL));
        check_ms += now_ms() - c0;
        call(bctx, cuco_baseline_run_compute, "baseline compute", true, &c, &dummy);
        call(bctx, cuco_baseline_run_comm, "baseline comm", true, &d, &dummy);
        // Baseline and candidate in an order drawn from the job's seed for each pair of iterations (order_bit: the
        // same on every rank; the candidate never sees it): a program whose call leaves state behind (an
        // allocator's cache, a freed scratch) would otherwise favour whichever of the two always comes second.
        // Every candidate call is verified (outputs and inputs, every rank; the outputs by the problem's
        // sampled check where it has one), outside its timing: a checked call and a timed call are the same
        // call. Baseline and candidate share the output buffers, so the check follows the candidate's call.
        bool vt = true;
        auto verified_candidate_call = [&]() {
          call(cctx, cand.run, "candidate", true, &b, &hcd);
          double v0 = now_ms();
          vt = verify(cctx, it < warmups ? "candidate (a warm-up call)" : "candidate (a timed call)", true);
          check_ms += now_ms() - v0;
        };
        if (order_bit(st.spec.seed, it)) {
          verified_candidate_call();
          call(bctx, base.run, "baseline", true, &a, &ha);
        } else {
          call(bctx, base.run, "baseline", true, &a, &ha);
          verified_candidate_call();
        }
        timed_ok = timed_ok && vt;
        if (it >= warmups) { tb.push_back(a); tc.push_back(b); tcomp.push_back(c); tcomm.push_back(d); hb.push_back(ha); hc.push_back(hcd); first.push_back(order_bit(st.spec.seed, it) ? 1.f : 0.f); }
        // Adaptive: after `iters`, whole pairs only, stop once the ratio's interval is narrow enough. Every
        // rank decides from the same all-reduced times (untimed), so all stop at the same iteration.
        const int done = it + 1 - warmups;
        if (it >= warmups) {
          float two[2] = {a, b};
          CKC(cudaMemcpy(slowest, two, sizeof two, cudaMemcpyHostToDevice));
          CKN(ncclAllReduce(slowest, slowest + 2, 2, ncclFloat32, ncclMax, st.hcomm, st.stream));
          CKC(cudaStreamSynchronize(st.stream));
          CKC(cudaMemcpy(two, slowest + 2, sizeof two, cudaMemcpyDeviceToHost));
          ratios.push_back((double)two[0] / std::max(1e-9, (double)two[1]));
        }
        if (done >= st.spec.iters && done % 2 == 0 && st.spec.target_width > 0) {
          double lo = 0, hi = 0, mid = median_exact(ratios);
          ratio_interval(ratios, &lo, &hi);
          if (mid > 0 && (hi - lo) / mid <= st.spec.target_width) break;
        }
      }
      cudaFree(slowest);
      rec("checkms\t%s\t%.6f", sc.name.c_str(), check_ms);
      bool v3 = timed_ok;
      cand_ok = cand_ok && v3;
      if (!any_rank_failed(!v3)) {
        auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
        std::vector<double> gb, gc;
        for (size_t i = 0; i < hb.size(); i++) { gb.push_back(hb[i] - tb[i]); gc.push_back(hc[i] - tc[i]); }
        double escaped = med(gc) - med(gb);
        double cm = med(std::vector<double>(tc.begin(), tc.end()));
        std::string line = "times\t" + sc.name;
        auto add = [&](const char* k, const std::vector<float>& v) { line += std::string("\t") + k; for (float x : v) { char b[32]; snprintf(b, sizeof b, " %.6f", x); line += b; } };
        add("baseline", tb); add("candidate", tc); add("comp", tcomp); add("comm", tcomm); add("first", first);
        rec("%s", line.c_str());
        rec("escape\t%s\t%.6f\t%.6f", sc.name.c_str(), escaped, cm);
        if (st.spec.timeline) profiled_call(st, cctx, cand.run, sc.name);   // after the timed loop, untimed
      } else {
        all_ok = false;
      }
    }
    if (cand_ok && all_ok) rec("ok\t%s", sc.name.c_str());
    else rec("fail\t%s\t%s", sc.name.c_str(), clean(cfg_err.empty() ? "another rank failed" : cfg_err).c_str());

    if (ok) cand.teardown(&cctx);
    st.start = nullptr;
    base.teardown(&bctx);
    CKC(cudaDeviceSynchronize());
    for (int i = 0; i < pb.ninputs; i++) { ncclCommWindowDeregister(st.comm, ctx.inputs[i].win); ncclMemFree(ctx.inputs[i].ptr); cudaFree(pristine[i]); }
    for (int i = 0; i < pb.noutputs; i++) { ncclCommWindowDeregister(st.comm, ctx.outputs[i].win); ncclMemFree(ctx.outputs[i].ptr); }
    (void)cudaGetLastError();
  }
  rec("done");
  // Every line of the verdict is written. NCCL's teardown waits until every CUDA graph that captured work on
  // the communicator is released; where that release never reaches NCCL (a program replaying captured
  // graphs, at one rank) the rank would hang with its verdict already written, and the job would read as a
  // hang: it exits after 10 s instead, saying so.
  signal(SIGALRM, [](int) {
    static const char m[] = "[rank] NCCL's teardown did not return within 10 s of the verdict: exiting without it\n";
    ssize_t w = write(2, m, sizeof m - 1);
    (void)w;
    _exit(0);
  });
  alarm(10);
  ncclCommDestroy(st.hcomm);
  ncclCommFinalize(st.comm); ncclCommDestroy(st.comm);
  fclose(g_out);
  _exit(0);
}

// ------------------------------------------------------------------------------------------------
// Parent: launcher and aggregation
// ------------------------------------------------------------------------------------------------
static std::vector<std::string> split_tab(const std::string& s) {
  std::vector<std::string> v; size_t a = 0;
  while (true) { size_t b = s.find('\t', a); v.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a)); if (b == std::string::npos) break; a = b + 1; }
  return v;
}

struct RankFile {
  std::vector<std::vector<std::string>> lines;
};

static double median_of(std::vector<double> v) { std::sort(v.begin(), v.end()); return v.empty() ? NAN : v[v.size() / 2]; }
static double iqr_of(std::vector<double> v) {
  if (v.size() < 2) return 0; std::sort(v.begin(), v.end());
  return v[(3 * v.size()) / 4 < v.size() ? (3 * v.size()) / 4 : v.size() - 1] - v[v.size() / 4];
}

static JobResult aggregate(const Spec& sp, const std::vector<RankFile>& rf, const std::string& launch_error) {
  JobResult jr; jr.mode = sp.mode; jr.ranks = sp.ranks; jr.error = launch_error;
  for (auto& sc : sp.configs) {
    ConfigResult c; c.name = sc.name;
    long long want = cfg_param(sc, "ranks", 0);
    if (want != 0 && want != sp.ranks) continue;  // not for this job's rank count
    std::vector<std::vector<double>> per_rank[5];  // baseline, candidate, comp, comm, candidate first
    bool all_ok = true, any_seen = false;
    double check_ms = 0;   // the slowest rank's
    TimelineParts tl_parts;
    for (size_t r = 0; r < rf.size(); r++) {
      bool ok_seen = false, begun = false;
      for (auto& l : rf[r].lines) {
        if (l.size() < 2 || l[1] != sc.name) continue;
        if (l[0] == "begin") begun = true;
        else if (l[0] == "ok") ok_seen = true;
        else if (l[0] == "cfgerror") { if (c.error.empty()) c.error = "rank " + std::to_string(r) + ": " + (l.size() > 2 ? l[2] : ""); }
        else if (l[0] == "fail") {
          std::string e = l.size() > 2 ? l[2] : "failed";
          if (e != "another rank failed" && (c.error.empty() || c.error.find("another rank") != std::string::npos)) c.error = "rank " + std::to_string(r) + ": " + e;
          else if (c.error.empty()) c.error = "rank " + std::to_string(r) + ": " + e;
        } else if (l[0] == "mismatch" && l.size() >= 8 && !c.mm.found) {
          // mismatch <config> <who> <index> <expected> <got> <what> <buffer>
          c.mm.found = true; c.mm.rank = (int)r; c.mm.index = atoll(l[3].c_str());
          c.mm.expected = strtod(l[4].c_str(), nullptr); c.mm.got = strtod(l[5].c_str(), nullptr);
          c.mm.what = l[6]; c.mm.buffer = l[7];
          c.error = "rank " + std::to_string(r) + ": " + l[2] + " output wrong (" + l[6] + ") in " + l[7] + " at index " + l[3];
        } else if (l[0] == "times") {
          for (size_t k = 2; k < l.size(); k++) {
            std::string f = l[k]; size_t sp_ = f.find(' ');
            std::string key = f.substr(0, sp_);
            int slot = key == "baseline" ? 0 : key == "candidate" ? 1 : key == "comp" ? 2 : key == "comm" ? 3 : key == "first" ? 4 : -1;
            if (slot < 0) continue;
            std::vector<double> v; const char* p = f.c_str() + (sp_ == std::string::npos ? f.size() : sp_);
            char* e; while (true) { double x = strtod(p, &e); if (e == p) break; v.push_back(x); p = e; }
            per_rank[slot].push_back(v);
          }
        } else if (l[0].compare(0, 2, "tl") == 0) {
          timeline_line(tl_parts, (int)r, l);
        } else if (l[0] == "checkms" && l.size() >= 3) {
          check_ms = std::max(check_ms, strtod(l[2].c_str(), nullptr));
        } else if (l[0] == "escape" && l.size() >= 4) {
          double esc = strtod(l[2].c_str(), nullptr), cm = strtod(l[3].c_str(), nullptr);
          if (esc > std::max(0.05, 0.5 * cm)) {
            all_ok = false;
            if (c.error.empty()) { char b[200]; snprintf(b, sizeof b, "rank %zu: work escaped the timed stream (host wall time exceeds event time by %.3f ms more than the baseline's)", r, esc); c.error = b; }
          }
        }
      }
      if (begun) any_seen = true;
      if (!ok_seen) all_ok = false;
    }
    c.ran = any_seen;
    jr.check_ms += check_ms;
    if (!any_seen && c.error.empty()) c.error = launch_error.empty() ? "config did not run" : "config did not run: " + launch_error;
    if (all_ok && c.error.empty() && !c.mm.found) c.correct = true;
    else if (c.error.empty()) c.error = "incorrect on some rank";
    if (c.correct && sp.mode == "benchmark") {
      double med[4], spr[4]; bool have = true;
      std::vector<double> iter_max[2];   // baseline, candidate: per iteration, the slowest rank
      for (int s = 0; s < 4; s++) {
        if (per_rank[s].size() != rf.size()) { have = false; break; }
        size_t n = per_rank[s][0].size(); std::vector<double> mx(n, 0.0);
        for (auto& v : per_rank[s]) { if (v.size() != n) { have = false; break; } for (size_t i = 0; i < n; i++) mx[i] = std::max(mx[i], v[i]); }
        if (!have || n == 0) { have = false; break; }
        med[s] = median_of(mx); spr[s] = iqr_of(mx);
        if (s < 2) iter_max[s] = mx;
        for (double x : mx) jr.timed_ms += x;   // the calls ran one after another
      }
      if (have) {
        c.timed = true; c.baseline_ms = med[0]; c.candidate_ms = med[1]; c.comp_ms = med[2]; c.comm_ms = med[3];
        c.baseline_spread = spr[0]; c.candidate_spread = spr[1];
        std::vector<double> ratios;
        for (size_t i = 0; i < iter_max[0].size(); i++) ratios.push_back(iter_max[0][i] / std::max(1e-9, iter_max[1][i]));
        c.speedup = median_exact(ratios);
        ratio_interval(ratios, &c.speedup_lo, &c.speedup_hi);
        c.round_base = iter_max[0]; c.round_cand = iter_max[1];
        c.round_cand_first = per_rank[4].empty() ? std::vector<double>(ratios.size(), 0.0) : per_rank[4][0];
        if (c.round_cand_first.size() != ratios.size()) c.round_cand_first.assign(ratios.size(), 0.0);
      } else { c.correct = false; c.error = "timings missing from some rank"; }
    }
    if (c.correct) timeline_json(tl_parts, rf.size(), c);
    jr.configs.push_back(c);
  }
  if (!rf.empty()) {
    for (auto& l : rf[0].lines) if (l.size() >= 3 && l[0] == "env") jr.env[l[1]] = l[2];
  }
  for (size_t r = 0; r < rf.size(); r++)
    for (auto& l : rf[r].lines) if (l.size() >= 2 && (l[0] == "fatal" || l[0] == "envfatal") && jr.error.empty()) jr.error = "rank " + std::to_string(r) + ": " + l[1];
  // the node's failure only from before a rank's "candidate" line: every line a candidate's code could have
  // written comes after it
  for (size_t r = 0; r < rf.size() && jr.environment.empty(); r++)
    for (auto& l : rf[r].lines) {
      if (!l.empty() && l[0] == "candidate") break;
      if (l.size() >= 2 && l[0] == "envfatal") { jr.environment = "rank " + std::to_string(r) + ": " + l[1]; break; }
    }
  jr.env["nccl_headers"] = std::to_string(NCCL_VERSION_CODE);
  jr.env["cuda_compiled"] = std::to_string(CUDART_VERSION);
  jr.correct = jr.error.empty() && !jr.configs.empty();
  for (auto& c : jr.configs) if (!c.correct) jr.correct = false;
  if (jr.configs.empty() && jr.error.empty()) jr.error = "no config applies to " + std::to_string(sp.ranks) + " ranks";
  return jr;
}

// The verdict written; the launcher's exit status (`status`, or another where it could not be written).
static int write_verdict(ResultFile& out, const JobResult& jr, int status) {
  std::string why = out.write(result_json(jr));
  if (why.empty() && out.replaced()) {
    JobResult bad; bad.mode = jr.mode; bad.nonce = jr.nonce; bad.ranks = jr.ranks;
    bad.error = "result.json was replaced while the job ran (the candidate wrote the job's directory): the harness's verdict was not where the engine reads it";
    ResultFile again;
    why = again.create(out.path()) ? again.write(result_json(bad)) : std::string("cannot create it again: ") + strerror(errno);
    if (why.empty()) return 3;
  }
  if (!why.empty()) { fprintf(stderr, "harness: cannot write %s: %s\n", out.path().c_str(), why.c_str()); return 5; }
  return status;
}

static int run_parent(const std::string& self, const std::string& spec_path, ResultFile& out, const std::string& nonce) {
  Spec sp; std::string err;
  if (!parse_spec(spec_path, sp, err)) {
    JobResult jr; jr.error = err; jr.nonce = nonce;
    fprintf(stderr, "harness: %s\n", err.c_str()); return write_verdict(out, jr, 2);
  }
  char tmpl[] = "/tmp/cuco-harness-XXXXXX";
  const char* tmpdir_env = getenv("TMPDIR");
  std::string base = std::string(tmpdir_env && *tmpdir_env ? tmpdir_env : "/tmp") + "/cuco-harness-XXXXXX";
  std::vector<char> tb(base.begin(), base.end()); tb.push_back(0);
  char* dir = mkdtemp(tb.data());
  if (!dir) dir = mkdtemp(tmpl);
  if (!dir) { JobResult jr; jr.mode = sp.mode; jr.nonce = nonce; jr.error = std::string("mkdtemp: ") + strerror(errno); return write_verdict(out, jr, 2); }
  std::string d = dir;
  std::vector<pid_t> pids(sp.ranks, -1);
  std::vector<std::string> outs(sp.ranks);
  // the host communicators' memory: made now, inherited by the ranks only, never mapped here
  int host_fds[3] = {host_comm_create(sp.ranks), host_comm_create(sp.ranks), host_comm_create(sp.ranks)};
  const std::string host_arg = host_comm_fds_arg(host_fds);
  fflush(stdout); fflush(stderr);
  for (int r = 0; r < sp.ranks; r++) {
    outs[r] = d + "/rank" + std::to_string(r) + ".txt";
    pid_t p = fork();
    if (p == 0) {
      std::string rs = std::to_string(r);
      const char* argv[] = {self.c_str(), "--child-rank", rs.c_str(), "--spec", spec_path.c_str(), "--iddir", d.c_str(), "--rankout", outs[r].c_str(),
                            "--host-comm", host_arg.c_str(), nullptr};
      int devnull = open("/dev/null", O_RDONLY);   // the nonce came on stdin: not for the ranks
      if (devnull >= 0) dup2(devnull, 0);
      execv("/proc/self/exe", (char* const*)argv);
      execv(self.c_str(), (char* const*)argv);
      _exit(127);
    }
    pids[r] = p;
  }
  for (int fd : host_fds) if (fd >= 0) close(fd);
  double t0 = now_ms(), deadline = t0 + sp.timeout_s * 1000.0;
  std::string launch_error;
  int alive = sp.ranks;
  std::vector<bool> done(sp.ranks, false);
  auto kill_all = [&]() { for (int r = 0; r < sp.ranks; r++) if (!done[r] && pids[r] > 0) kill(pids[r], SIGKILL); };
  while (alive > 0) {
    int status = 0; pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < sp.ranks; r++) if (pids[r] == p) {
        done[r] = true; alive--;
        bool bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (bad && launch_error.empty()) {
          char b[160];
          if (WIFSIGNALED(status)) snprintf(b, sizeof b, "rank %d killed by signal %d", r, WTERMSIG(status));
          else snprintf(b, sizeof b, "rank %d exited with status %d", r, WEXITSTATUS(status));
          launch_error = b;
          kill_all();  // the others would block in collectives
        }
      }
      continue;
    }
    if (now_ms() > deadline) {
      char b[200]; snprintf(b, sizeof b, "timeout: ranks still running after %.0f s (a hang, e.g. a flag never raised); all ranks killed", sp.timeout_s);
      launch_error = b;
      kill_all();
      for (int r = 0; r < sp.ranks; r++) if (!done[r]) { waitpid(pids[r], nullptr, 0); done[r] = true; }
      break;
    }
    usleep(20000);
  }
  std::vector<RankFile> rf(sp.ranks);
  for (int r = 0; r < sp.ranks; r++) {
    std::string text; read_file(outs[r], text);
    size_t a = 0;
    while (a < text.size()) { size_t b = text.find('\n', a); if (b == std::string::npos) b = text.size(); if (b > a) rf[r].lines.push_back(split_tab(text.substr(a, b - a))); a = b + 1; }
    unlink(outs[r].c_str());
  }
  unlink((d + "/ncclid").c_str()); unlink((d + "/ncclid.tmp").c_str()); rmdir(d.c_str());
  JobResult jr = aggregate(sp, rf, launch_error);
  jr.nonce = nonce;
  char wall[32]; snprintf(wall, sizeof wall, "%.1f", (now_ms() - t0) / 1000.0); jr.env["wall_s"] = wall;
  const int status = write_verdict(out, jr, 0);
  if (status == 0) printf("harness: wrote %s (correct=%s)\n", out.path().c_str(), jr.correct ? "true" : "false");
  return status;
}

static int self_test_json(const std::string& path) {
  JobResult jr; jr.mode = "benchmark"; jr.correct = false; jr.ranks = 2;
  ConfigResult a; a.name = "m8k"; a.ran = a.correct = true; a.timed = true;
  a.baseline_ms = 1.2; a.candidate_ms = 0.85; a.baseline_spread = 0.02; a.candidate_spread = 0.01; a.comp_ms = 0.7; a.comm_ms = 0.45;
  a.speedup = 1.2 / 0.85; a.speedup_lo = 1.3; a.speedup_hi = 1.5; a.round_base = {1.2, 1.2}; a.round_cand = {0.85, 0.85}; a.round_cand_first = {0, 1};
  ConfigResult b; b.name = "odd \"quoted\"\tname"; b.ran = true; b.correct = false; b.error = "rank 1: candidate output wrong (gather) in C at index 4711";
  b.mm.found = true; b.mm.rank = 1; b.mm.index = 4711; b.mm.expected = 1.5; b.mm.got = NAN; b.mm.what = "gather"; b.mm.buffer = "C";
  jr.configs = {a, b}; jr.error = "";
  jr.env["host"] = "self-test"; jr.env["nccl_headers"] = std::to_string(NCCL_VERSION_CODE);
  jr.nonce = "self-test-nonce-0123456789abcdef";
  if (!write_atomic(path, result_json(jr))) return 2;
  // the writer's output must parse with the harness's own parser too
  std::string text; read_file(path, text);
  JParser jp{text.data(), text.data() + text.size(), ""}; JVal v;
  if (!jp.val(v)) { fprintf(stderr, "self-test: invalid JSON: %s\n", jp.err.c_str()); return 1; }
  return 0;
}

int main(int argc, char** argv) {
  init_host_clock();   // before any candidate code runs
  std::string spec, result, iddir, rankout, self_json; int child = -1; bool nonce_stdin = false;
  int host_fds[3] = {-1, -1, -1}, host_test_rank = -1, host_test_ranks = 0;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { if (i + 1 >= argc) { fprintf(stderr, "harness: %s needs a value\n", a.c_str()); exit(2); } return argv[++i]; };
    if (a == "--spec") spec = next();
    else if (a == "--result") result = next();
    else if (a == "--child-rank") child = atoi(next().c_str());
    else if (a == "--iddir") iddir = next();
    else if (a == "--rankout") rankout = next();
    else if (a == "--self-test-json") self_json = next();
    else if (a == "--nonce-stdin") nonce_stdin = true;
    else if (a == "--host-comm") host_comm_fds_parse(next(), host_fds);
    else if (a == "--self-test-host-comm") host_test_ranks = atoi(next().c_str());
    else if (a == "--host-comm-test-rank") host_test_rank = atoi(next().c_str());
    else if (a == "--ranks") host_test_ranks = atoi(next().c_str());
    else { fprintf(stderr, "harness: unknown argument %s\nusage: %s --spec spec.json --result result.json\n", a.c_str(), argv[0]); return 2; }
  }
  if (!self_json.empty()) return self_test_json(self_json);
  if (host_test_rank >= 0) return host_comm_test_rank(host_test_rank, host_test_ranks, host_fds);
  if (host_test_ranks > 0) return self_test_host_comm(argv[0], host_test_ranks);
  if (child >= 0) { run_child(child, spec, iddir, rankout, host_fds); return 0; }
  if (spec.empty() || result.empty()) { fprintf(stderr, "usage: %s --spec spec.json --result result.json\n", argv[0]); return 2; }
  // Not dumpable from the start: a rank (same user, no system-call filter) can neither attach to this
  // process, which holds the nonce and writes the verdict, nor open its /proc/PID/mem, environ or fds.
  prctl(PR_SET_DUMPABLE, 0);
  ResultFile out;
  if (!out.create(result)) { fprintf(stderr, "harness: cannot create %s: %s\n", result.c_str(), strerror(errno)); return 5; }
  // The engine's nonce arrives as stdin (a file no other process holds open, its name already gone), read
  // once; the descriptor is then closed.
  std::string nonce;
  if (nonce_stdin) {
    char buf[129] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, stdin);
    nonce.assign(buf, n);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (nonce.size() < 16) {
      JobResult jr; jr.error = "the job's nonce was missing from stdin (read by someone else?)";
      fprintf(stderr, "harness: %s\n", jr.error.c_str()); return write_verdict(out, jr, 2);
    }
  }
  return run_parent(argv[0], spec, out, nonce);
}
