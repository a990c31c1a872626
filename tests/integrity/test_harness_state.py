"""The CPU harness's state lies outside the candidate's address space (workloads/_harness/cpu/harness.cpp,
ranks.cpp, cuco_shared.h): the judge's process holds the clock, the link model, the pristine inputs, the
reference, the nonce and the verdict; the candidate's ranks run in a process of their own that shares only
the data buffers and the link's queue with it.

When ranks were threads of the harness's process, each candidate here reached what it went for: it found
the pristine copies of its inputs (and could zero them with the inputs: zeros then verify), the link
model's bandwidth, the clock's function pointer (swapped for one that rewinds over its own calls) and the
job's nonce (a result.json of its own, then an exit before any verification). Each walks every writable
(or readable) page of its own process, through /proc/self/maps, as an adversary would.

The workload's policy here allows the libc calls the walkers make (stdio, `strstr`, `dlopen`/`dlsym`, `_exit`), as a
computed pointer would get round it: the process boundary must hold on its own. Real g++, the real
cascade, a real local executor.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from engine.evaluation.evaluation import EvalOutcome
from tests.integrity.evaluate_all import demo_cheats, evaluate_all

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the candidates are compiled")

ALLOWED = [
    "fopen",
    "fgets",
    "fclose",
    "fputs",
    "fwrite",
    "fflush",
    "sscanf",
    "__isoc99_sscanf",
    "strstr",
    "printf",
    "dlopen",
    "dlsym",
    "_exit",
    "snprintf",
    "getppid",
]

# What every walker declares: stdio, and the mappings of its own process, writable ones or all readable.
WALK = (
    "typedef struct _IO_FILE FILE;\n"
    'extern "C" FILE* fopen(const char*, const char*);\n'
    'extern "C" char* fgets(char*, int, FILE*);\n'
    'extern "C" int fclose(FILE*);\n'
    'extern "C" int fputs(const char*, FILE*);\n'
    'extern "C" int fflush(FILE*);\n'
    'extern "C" int sscanf(const char*, const char*, ...);\n'
    'extern "C" int printf(const char*, ...);\n'
    'extern "C" void* dlopen(const char*, int);\n'
    'extern "C" void* dlsym(void*, const char*);\n'
    'extern "C" void _exit(int);\n'
    'extern "C" int snprintf(char*, unsigned long, const char*, ...);\n'
    'extern "C" int getppid(void);\n'
    "static int cuco_candidate_maps(unsigned long* lo, unsigned long* hi, int cap, bool writable) {\n"
    '  FILE* f = fopen("/proc/self/maps", "r");\n'
    "  if (!f) return 0;\n"
    "  char line[512];\n"
    "  int n = 0;\n"
    "  while (n < cap && fgets(line, sizeof line, f)) {\n"
    '    unsigned long a, b; char perm[8] = "";\n'
    "    if (sscanf(line, \"%lx-%lx %7s\", &a, &b, perm) != 3 || perm[0] != 'r') continue;\n"
    "    if (writable && perm[1] != 'w') continue;\n"
    '    if (strstr(line, "[vvar") || strstr(line, "[vsyscall")) continue;\n'
    "    lo[n] = a; hi[n] = b; ++n;\n"
    "  }\n"
    "  fclose(f);\n"
    "  return n;\n"
    "}\n"
    "static unsigned long g_lo[8192], g_hi[8192];\n"
)

# Zero every other copy of its inputs it can find (the harness's pristine copies), then the inputs
# themselves, and compute nothing: zeros are the right product of zeros, if the checks read those copies.
ZERO_INPUTS = (
    "  {\n"
    "    int copies = 0;\n"
    "    if (p->rank == 0) {\n"
    "      const int n = cuco_candidate_maps(g_lo, g_hi, 8192, true);\n"
    "      const unsigned long want = 16 * sizeof(float), size = (unsigned long)p->M * p->K * sizeof(float);\n"
    "      for (int k = 0; k < n; ++k)\n"
    "        for (unsigned long a = g_lo[k]; a + size <= g_hi[k]; a += sizeof(float))\n"
    "          if ((const float*)a != p->A && !memcmp((const void*)a, p->A, want)) { memset((void*)a, 0, size); ++copies; }\n"
    '      printf("copies of the inputs found and zeroed: %d\\n", copies);\n'
    "      fflush(nullptr);\n"
    "      memset((void*)p->A, 0, size);\n"
    "    }\n"
    "    memset((void*)p->B, 0, (size_t)p->K * p->N * sizeof(float));\n"
    "    const int N = p->N, ld = p->ranks * N;\n"
    "    for (int i = 0; i < p->M; ++i) memset(p->out + (size_t)i * ld + (size_t)p->rank * N, 0, sizeof(float) * N);\n"
    "    memset(p->scratch, 0, sizeof(float) * (size_t)p->M * N);\n"
    "    p->barrier(p->barrier_ctx);\n"
    "    for (int q = 0; q < p->ranks; ++q)\n"
    "      if (q != p->rank) p->put(p->link, p->rank, q, 0, p->rank * N, p->M, N, p->scratch, N, 0);\n"
    "    return p->wait(p->link, p->rank, 0, p->ranks - 1, 20000) == 0 ? 0 : 6;\n"
    "  }\n"
)

# Halve the link model's bandwidth wherever it lies (a double of link_gbps * 1e9 bytes per second): the
# baseline and the overlap bound then slow down together, and the candidate looks faster.
HALVE_LINK = (
    "  {\n"
    "    static int halved = 0;\n"
    "    if (p->rank == 0) {\n"
    "      const int n = cuco_candidate_maps(g_lo, g_hi, 8192, true);\n"
    "      static const double speeds[] = {0.4e9, 0.16e9, 2.0e9};   // not on the stack, where it would be found\n"
    "      for (int k = 0; k < n; ++k)\n"
    "        for (unsigned long a = g_lo[k]; a + sizeof(double) <= g_hi[k]; a += sizeof(double))\n"
    "          for (double s : speeds)\n"
    "            if (*(double*)a == s) { *(double*)a = s / 2; ++halved; }\n"
    '      printf("link bandwidths found and halved: %d\\n", halved);\n'
    "      fflush(nullptr);\n"
    "    }\n"
    "    p->barrier(p->barrier_ctx);\n"
    "    if (halved == 0) return 41;   // nothing to gain from here on: say so, as the verdict\n"
    "  }\n"
)

# Swap the clock's function pointer (the vDSO's clock_gettime, held in writable memory) for one that runs behind
# by everything the candidate spends in its calls, then burn 10 ms per call that nobody should see. (Its
# rewound clock also stamps its puts before the call began: the judge takes such a stamp as the call's
# start, a time an honest put could have had; that gains at most the link time, 2.6 ms on tall.)
REWIND_CLOCK = (
    "typedef int (*cuco_candidate_clock_fn)(int, struct timespec*);\n"
    "static cuco_candidate_clock_fn g_real;\n"
    "static volatile long g_behind_ns;\n"
    "static int cuco_candidate_rewound(int id, struct timespec* ts) {\n"
    "  int rc = g_real(id, ts);\n"
    "  long t = ts->tv_sec * 1000000000L + ts->tv_nsec - g_behind_ns;\n"
    "  ts->tv_sec = t / 1000000000L; ts->tv_nsec = t % 1000000000L;\n"
    "  return rc;\n"
    "}\n"
    "static long cuco_candidate_real_ns() {\n"
    "  struct timespec ts; g_real(1, &ts); return ts.tv_sec * 1000000000L + ts.tv_nsec;\n"
    "}\n"
)
REWIND_HEAD = (
    "  static int swapped = -1;\n"
    "  if (p->rank == 0 && swapped < 0) {\n"
    "    swapped = 0;\n"
    '    void* vdso = dlopen("linux-vdso.so.1", 4 /* RTLD_NOLOAD */ | 1);\n'
    '    const unsigned long clock = vdso ? (unsigned long)dlsym(vdso, "__vdso_clock_gettime") : 0;\n'
    "    const int n = cuco_candidate_maps(g_lo, g_hi, 8192, true);\n"
    "    for (int k = 0; k < n; ++k)\n"
    "      for (unsigned long a = g_lo[k]; a + 8 <= g_hi[k]; a += 8) {\n"
    "        unsigned long v = *(unsigned long*)a;\n"
    "        if (clock && v == clock && a != (unsigned long)&g_real) {\n"
    "          g_real = (cuco_candidate_clock_fn)v;\n"
    "          *(unsigned long*)a = (unsigned long)&cuco_candidate_rewound;\n"
    "          ++swapped;\n"
    "        }\n"
    "      }\n"
    '    printf("clock pointers swapped: %d\\n", swapped);\n'
    "    fflush(nullptr);\n"
    "  }\n"
    "  p->barrier(p->barrier_ctx);\n"
    "  if (swapped > 0 && p->rank == 0) {\n"
    "    const long until = cuco_candidate_real_ns() + 10000000;\n"
    "    while (cuco_candidate_real_ns() < until) {}\n"
    "    g_behind_ns = g_behind_ns + 10000000;   // the clock now runs 10 ms further behind\n"
    "  }\n"
)

# Find the job's nonce (32 hex digits) anywhere it can read, write a result.json of its own with it, and
# exit before any verification.
FORGE_RESULT = (
    "  {\n"
    "    const int n = cuco_candidate_maps(g_lo, g_hi, 8192, false);\n"
    '    char nonce[33] = "";\n'
    "    int found = 0;\n"
    "    for (int k = 0; k < n && !found; ++k) {\n"
    "      int run = 0;\n"
    "      for (unsigned long a = g_lo[k]; a < g_hi[k]; ++a) {\n"
    "        char c = *(const char*)a;\n"
    "        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');\n"
    "        run = hex ? run + 1 : 0;\n"
    "        if (run == 32 && a + 1 < g_hi[k] && !(((*(const char*)(a + 1)) >= '0' && (*(const char*)(a + 1)) <= '9') ||\n"
    "                                               ((*(const char*)(a + 1)) >= 'a' && (*(const char*)(a + 1)) <= 'f'))) {\n"
    "          memcpy(nonce, (const char*)a - 31, 32); nonce[32] = 0; found = 1; break;\n"
    "        }\n"
    "      }\n"
    "    }\n"
    '    printf("nonces found: %d\\n", found);\n'
    '    if (FILE* f = fopen("result.json", "w")) {\n'
    '      fputs("{\\"harness\\": \\"cuco-cpu/1\\", \\"mode\\": \\"verify\\", \\"correct\\": true, \\"error\\": null, "\n'
    '            "\\"configs\\": [{\\"name\\": \\"tall\\", \\"correct\\": true}, {\\"name\\": \\"square\\", \\"correct\\": true}, "\n'
    '            "{\\"name\\": \\"odd\\", \\"correct\\": true}, {\\"name\\": \\"sliver\\", \\"correct\\": true}], \\"nonce\\": \\"", f);\n'
    "      fputs(nonce, f);\n"
    '      fputs("\\"}\\n", f);\n'
    "      fclose(f);\n"
    "    }\n"
    "    fflush(nullptr);\n"
    "    _exit(0);\n"
    "  }\n"
)

# Open the judge's memory and environment through /proc (its parent, the same user): the reference, the
# link model, the clock and the nonce are all in there.
READ_THE_JUDGE = (
    "  {\n"
    "    static int opened = 0;\n"
    "    if (p->rank == 0) {\n"
    '      const char* what[] = {"mem", "environ", "fd/3"};\n'
    "      for (const char* w : what) {\n"
    "        char path[64];\n"
    '        snprintf(path, sizeof path, "/proc/%d/%s", getppid(), w);\n'
    '        if (FILE* f = fopen(path, "rb")) { ++opened; fclose(f); }\n'
    "      }\n"
    '      printf("files of the judge opened: %d\\n", opened);\n'
    "      fflush(nullptr);\n"
    "    }\n"
    "    p->barrier(p->barrier_ctx);\n"
    "    if (opened == 0) return 43;   // nothing to read: say so, as the verdict\n"
    "  }\n"
)

CHEATS = {
    "read_the_judge": (WALK, READ_THE_JUDGE),
    "zero_the_pristine_inputs": (WALK, ZERO_INPUTS),
    "halve_the_link_model": (WALK, HALVE_LINK),
    "rewind_the_clock": (WALK + REWIND_CLOCK, REWIND_HEAD),
    "forge_the_result": (WALK, FORGE_RESULT),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, EvalOutcome]:
    tmp = tmp_path_factory.mktemp("state")
    workload, sources = demo_cheats(tmp, CHEATS, ALLOWED, iters=3)
    return evaluate_all(workload, sources, Path(tmp) / "jobs", seed=5)


def logs(out: EvalOutcome) -> str:
    return "\n".join(s.log or "" for s in out.stages)


def count(out: EvalOutcome, what: str) -> int:
    m = re.search(re.escape(what) + r": (\d+)", logs(out))
    assert m, (what, out.status, out.reason, logs(out)[-2000:])
    return int(m.group(1))


def test_the_judges_memory_is_not_open_to_the_candidate(outcomes):
    """The judge is not dumpable and the ranks' process holds no capability: its /proc files stay shut."""
    out = outcomes["read_the_judge"]
    assert out.status == "incorrect", (out.status, out.reason)
    assert "cuco_run returned 43" in out.reason, out.reason
    assert count(out, "files of the judge opened") == 0


def test_zeroing_the_inputs_and_their_copies_is_incorrect(outcomes):
    """The pristine copies live in the judge's process: the walker finds none, and zeroing the inputs it
    shares is seen as exactly that."""
    out = outcomes["zero_the_pristine_inputs"]
    assert out.status == "incorrect", (out.status, out.reason)
    assert "the candidate modified its inputs" in out.reason, out.reason
    assert count(out, "copies of the inputs found and zeroed") == 0


def test_the_link_model_is_not_in_the_candidates_memory(outcomes):
    """The link model is the judge's: no bandwidth to halve anywhere the candidate can write."""
    out = outcomes["halve_the_link_model"]
    assert out.status == "incorrect", (out.status, out.reason)
    assert "cuco_run returned 41" in out.reason, out.reason
    assert count(out, "link bandwidths found and halved") == 0


def test_a_clock_swapped_in_the_candidates_process_does_not_time_its_calls(outcomes):
    """The ranks' process has a clock pointer of its own, and the walker swaps it; the judge's clock,
    in another process, still sees every millisecond the candidate burns."""
    out = outcomes["rewind_the_clock"]
    assert count(out, "clock pointers swapped") >= 1
    assert out.status == "done", (out.status, out.reason)
    for c in out.metrics["benchmark"]["configs"]:  # 10 ms burned per call, all of it timed
        assert c["candidate_ms"] >= 9.5 and c["speedup"] < 0.95, c


def test_a_result_forged_before_verification_is_not_believed(outcomes):
    """No nonce in the candidate's process to find; the judge sees its ranks' process end early and writes
    its own verdict over the forged file."""
    out = outcomes["forge_the_result"]
    assert out.status in ("incorrect", "failed"), (out.status, out.reason)
    assert out.speedup is None
    assert "exited before the harness finished" in out.reason, out.reason
    assert count(out, "nonces found") == 0
