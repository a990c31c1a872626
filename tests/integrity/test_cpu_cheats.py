"""One adversarial candidate per cheat class against the CPU harness (real g++ compiles, the real
evaluation cascade on a real local executor). Every candidate is a legal edit of the demo seed's
EVOLVE-BLOCK, as an LLM would write it; each must be refused before anything of it runs, or measured
honestly, and each test names the defence that caught it (docs/threat-model.md lists them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil

import pytest

from engine import blocks
from engine.evaluation.evaluation import EvalOutcome
from engine.workload import load_workload
from remote.local import LocalExecutor
from tests.integrity.evaluate_all import evaluate_all

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None, reason="g++ is not on PATH: these tests compile real candidates with the harness"
)

RUN_HEAD = 'extern "C" int cuco_run(const cuco_problem* p) {\n'


def edit(seed: str, decls: str = "", head: str = "") -> str:
    """The seed with declarations added before cuco_run and code at its start, inside the block."""
    assert seed.count(RUN_HEAD) == 1
    src = seed.replace(RUN_HEAD, decls + RUN_HEAD + head)
    blocks.validate_child(seed, src)  # a legal edit: only the policy or the harness stops it
    return src


# name -> (decls, code at the start of cuco_run)
CHEATS = {
    # interposition: a libc function the harness calls, the C++ runtime's clock, memcpy
    "defines_clock_gettime": ('extern "C" int clock_gettime(int, struct timespec*) noexcept { return 0; }\n', ""),
    "defines_memcpy": (
        'extern "C" void* memcpy(void* d, const void* s, unsigned long n) noexcept {\n'
        "  for (unsigned long i = 0; i < n; ++i) ((char*)d)[i] = ((const char*)s)[i];\n"
        "  return d;\n}\n",
        "",
    ),
    "defines_steady_clock_now": (
        "namespace std { namespace chrono { inline namespace _V2 {\n"
        "steady_clock::time_point steady_clock::now() noexcept { return time_point(); }\n"
        "} } }\n",
        "",
    ),
    "weak_definition": ('extern "C" __attribute__((weak)) int cuco_weak_hook(void) { return 0; }\n', ""),
    "alias": (
        'extern "C" int cuco_candidate_fake_clock(int, void*) { return 0; }\n'
        'extern "C" int clock_settime(int, const struct timespec*) noexcept '
        '__attribute__((alias("cuco_candidate_fake_clock")));\n',
        "",
    ),
    "ifunc": (
        'extern "C" int cuco_candidate_impl(void) { return 0; }\n'
        'extern "C" void* cuco_candidate_resolve(void) { return (void*)cuco_candidate_impl; }\n'
        'extern "C" int cuco_candidate_fast(void) __attribute__((ifunc("cuco_candidate_resolve")));\n',
        "",
    ),
    # load-time code
    "constructor": (
        "static volatile int g_early;\n__attribute__((constructor)) static void cuco_early(void) { g_early = 1; }\n",
        "",
    ),
    "global_object": ("static std::vector<float> g_saved(16);\n", "  g_saved[0] = 1.f;\n"),
    "destructor": (
        "static volatile int g_late;\n__attribute__((destructor)) static void cuco_late(void) { g_late = 1; }\n",
        "",
    ),
    "own_section": ('__attribute__((used, section("cuco_hooks"))) static const int cuco_marker = 7;\n', ""),
    "preinit_array": (
        "static void cuco_pre(void) {}\n"
        '__attribute__((used, section(".preinit_array"))) static void (*cuco_pre_p)(void) = cuco_pre;\n',
        "",
    ),
    "exit_handler": (
        'extern "C" int atexit(void (*)(void)) noexcept;\nstatic void cuco_bye(void) {}\n',
        "  atexit(cuco_bye);\n",
    ),
    # self-patching and escapes from the process's rules
    "mprotect_self_patch": (
        'extern "C" int mprotect(void*, unsigned long, int) noexcept;\n',
        "  mprotect((void*)((unsigned long)p->put & ~4095UL), 4096, 7);\n",
    ),
    "dlsym": (
        'extern "C" void* dlsym(void*, const char*) noexcept;\n',
        '  if (dlsym(nullptr, "baseline_run") == nullptr) return 9;\n',
    ),
    "raw_syscall": ('extern "C" long syscall(long, ...) noexcept;\n', "  syscall(39);\n"),
    "inline_asm_syscall": ("", '  if (p->rank == 99) asm volatile("syscall" ::: "rax", "rcx", "r11", "memory");\n'),
    "fork": ('extern "C" int fork(void) noexcept;\n', "  if (p->rank == 99) fork();\n"),
    "setenv": (
        'extern "C" int setenv(const char*, const char*, int) noexcept;\n',
        '  setenv("OMP_NUM_THREADS", "1", 1);\n',
    ),
    # slowing the baseline from the candidate's side: one core for the whole process
    "affinity": ("", "  cpu_set_t one{};\n  one.__bits[0] = 1;\n  sched_setaffinity(0, sizeof one, &one);\n"),
    "reads_clock": ("", "  (void)std::chrono::steady_clock::now();\n"),
    # measured, not refused: these pass the policy and meet the harness
    "call_counting": (
        "static std::atomic<int> g_calls{0};\n",
        "  if (g_calls.fetch_add(1) >= 8) return 0;   // skip the work once timing has begun\n",
    ),
    # around the link: ranks are threads of one process, so a static table lets them read each other's
    # memory, and a put names the link it rides on
    "peer_memory_gather": (
        "static float* g_outs[64];\n",
        "  {\n"
        "    const int ld = p->ranks * p->N;\n"
        "    gemm_rows(p, 0, p->M, p->scratch, p->N);\n"
        "    for (int i = 0; i < p->M; ++i)\n"
        "      memcpy(p->out + (size_t)i * ld + (size_t)p->rank * p->N, p->scratch + (size_t)i * p->N,\n"
        "             sizeof(float) * p->N);\n"
        "    g_outs[p->rank] = p->out;\n"
        "    p->barrier(p->barrier_ctx);   // every tile computed: read the peers' straight from them\n"
        "    for (int q = 0; q < p->ranks; ++q)\n"
        "      if (q != p->rank)\n"
        "        for (int i = 0; i < p->M; ++i)\n"
        "          memcpy(p->out + (size_t)i * ld + (size_t)q * p->N, g_outs[q] + (size_t)i * ld + (size_t)q * p->N,\n"
        "                 sizeof(float) * p->N);\n"
        "    p->barrier(p->barrier_ctx);\n"
        "    return 0;\n"
        "  }\n",
    ),
    "borrowed_link": (
        "",
        "  {\n"
        "    const int N = p->N, ld = p->ranks * N, rank = p->rank;\n"
        "    gemm_rows(p, 0, p->M, p->scratch, N);\n"
        "    for (int i = 0; i < p->M; ++i)\n"
        "      memcpy(p->out + (size_t)i * ld + (size_t)rank * N, p->scratch + (size_t)i * N, sizeof(float) * N);\n"
        "    p->barrier(p->barrier_ctx);\n"
        "    for (int peer = 0; peer < p->ranks; ++peer)   // each tile on the receiver's own link\n"
        "      if (peer != rank) p->put(p->link, peer, peer, 0, rank * N, p->M, N, p->scratch, N, 0);\n"
        "    return p->wait(p->link, rank, 0, p->ranks - 1, 20000) == 0 ? 0 : 6;\n"
        "  }\n",
    ),
    "spinner_thread": (
        "static std::atomic<int> g_started{0};\n",
        "  if (g_started.exchange(1) == 0)   // burns a core while the baseline runs\n"
        "    std::thread([] { for (;;) std::this_thread::yield(); }).detach();\n",
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, EvalOutcome]:
    workload = load_workload("demo")
    fast = dataclasses.replace(workload, warmup=1, iters=3)
    sources = {name: edit(workload.seed_source, *code) for name, code in CHEATS.items()}
    work = tmp_path_factory.mktemp("cheats")

    return evaluate_all(fast, sources, work, seed=77)


def refused(outcomes, name: str, *words: str) -> str:
    out = outcomes[name]
    assert out.status == "refused", (name, out.status, out.reason)
    assert [s.stage for s in out.stages] == ["build"], "nothing may run after a refusal"
    for w in words:
        assert w in out.reason, (name, out.reason)
    return out.reason


# ----- defence: the symbol policy (only the ABI may be defined) ---------------------------------------


def test_interposing_a_libc_clock_is_refused_naming_it(outcomes):
    refused(outcomes, "defines_clock_gettime", "candidate defines `clock_gettime`: only the ABI")


def test_interposing_memcpy_is_refused(outcomes):
    refused(outcomes, "defines_memcpy", "candidate defines `memcpy`")


def test_interposing_the_cpp_runtime_clock_is_refused(outcomes):
    refused(outcomes, "defines_steady_clock_now", "candidate defines `_ZNSt6chrono3_V212steady_clock3nowEv`")


def test_weak_definition_is_refused(outcomes):
    refused(outcomes, "weak_definition", "`cuco_weak_hook` as a weak symbol")


def test_alias_is_refused(outcomes):
    refused(outcomes, "alias", "`clock_settime`")


def test_ifunc_is_refused(outcomes):
    refused(outcomes, "ifunc", "`cuco_candidate_fast` as an ifunc")


# ----- defence: the symbol policy (no load-time code, no sections of its own) -------------------------


def test_constructor_is_refused(outcomes):
    refused(outcomes, "constructor", "constructor", ".init_array")


def test_global_object_with_a_constructor_is_refused(outcomes):
    reason = refused(outcomes, "global_object", "constructor")
    assert "__cxa_atexit" in reason  # its destructor would run at exit, after the harness's verdict


def test_destructor_is_refused(outcomes):
    refused(outcomes, "destructor", "`.fini_array` section")


def test_section_of_its_own_is_refused(outcomes):
    refused(outcomes, "own_section", "section of its own, `cuco_hooks`")


def test_preinit_array_entry_is_refused(outcomes):
    refused(outcomes, "preinit_array", "`.preinit_array` section")


def test_exit_handler_is_refused(outcomes):
    refused(outcomes, "exit_handler", "candidate calls `atexit` (exit handlers)")


# ----- defence: the symbol policy's allow-list of calls ------------------------------------------------


def test_self_patching_with_mprotect_is_refused(outcomes):
    refused(outcomes, "mprotect_self_patch", "candidate calls `mprotect` (memory protection or mapping)")


def test_dlsym_is_refused(outcomes):
    refused(outcomes, "dlsym", "candidate calls `dlsym` (dynamic loading)")


def test_raw_syscall_is_refused(outcomes):
    refused(outcomes, "raw_syscall", "candidate calls `syscall` (raw system calls")


def test_fork_is_refused(outcomes):
    refused(outcomes, "fork", "candidate calls `fork` (processes)")


def test_setenv_is_refused(outcomes):
    refused(outcomes, "setenv", "candidate calls `setenv` (the environment)")


def test_pinning_the_process_to_one_core_is_refused(outcomes):
    refused(outcomes, "affinity", "candidate calls `sched_setaffinity` (scheduling and affinity)")


def test_reading_the_clock_is_refused(outcomes):
    refused(outcomes, "reads_clock", "(clocks)")


# ----- defence: the block rules (no host assembly) ------------------------------------------------------


def test_inline_assembly_is_refused_by_the_block_rules(outcomes):
    refused(outcomes, "inline_asm_syscall", "refused by the block rules", "inline assembly (`asm`)")


# ----- defence: the harness (measured honestly) ----------------------------------------------------------


def test_call_counting_to_skip_timed_work_is_incorrect(outcomes):
    """Poisoned outputs before every call and a verified call after the timed loop."""
    out = outcomes["call_counting"]
    assert out.status == "incorrect", (out.status, out.reason)
    assert "rank" in out.reason


def test_a_thread_left_spinning_to_slow_the_baseline_fails_the_call(outcomes):
    """Threads a call starts must have ended when it returns (the harness counts the process's threads)."""
    out = outcomes["spinner_thread"]
    assert out.status in ("failed", "incorrect") and out.speedup is None, (out.status, out.reason)
    assert "thread(s) it started were still running" in out.reason


def test_reading_peer_tiles_from_their_memory_instead_of_the_link_is_incorrect(outcomes):
    """Every tile a rank holds of its peers must have landed through the link in that very call."""
    out = outcomes["peer_memory_gather"]
    assert out.status == "incorrect" and out.speedup is None, (out.status, out.reason)
    assert "did not arrive through the link" in out.reason, out.reason


def test_putting_on_another_ranks_link_is_incorrect(outcomes):
    """A put rides the calling rank's own link: another rank's would add bandwidth the model does not have."""
    out = outcomes["borrowed_link"]
    assert out.status == "incorrect" and out.speedup is None, (out.status, out.reason)
    assert "another rank's link" in out.reason, out.reason


def test_the_seed_and_every_shipped_variant_pass_the_policy(tmp_path):
    """The control: what the project ships is not refused."""
    from engine import symbol_policy
    from engine.evaluation.evaluation import CANDIDATE_OBJECT, build_job

    workload = load_workload("demo")
    sources = {
        "seed": workload.seed_source,
        **{v.name: blocks.replace_blocks(workload.seed_source, v.bodies) for v in workload.design_space.variants},
    }

    async def build_all() -> dict[str, bytes]:
        executor = LocalExecutor(work_dir=tmp_path)
        try:
            jobs = [executor.run(build_job(workload, src, f"policy-{name}")) for name, src in sources.items()]
            return {name: res.outputs[CANDIDATE_OBJECT] for name, res in zip(sources, await asyncio.gather(*jobs))}
        finally:
            await executor.close()

    for name, obj in asyncio.run(build_all()).items():
        verdict = symbol_policy.check(obj, workload)
        assert verdict.ok, (name, verdict.reason)
        assert symbol_policy.check_source(sources[name], workload.language) == []
