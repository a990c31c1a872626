"""The CPU harness's system-call filter (workloads/_harness/cpu/cuco_seccomp.h): what a candidate reaches
past the symbol policy (a denied function the policy did not see, bytes of its own made a syscall stub)
the kernel still refuses, and the verdict names the call.

The workload's policy here allows the calls, as a computed pointer would get round it: the filter must
hold on its own. Real g++, the real cascade, a real local executor.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.evaluation.evaluation import EvalOutcome
from tests.integrity.evaluate_all import demo_cheats, evaluate_all

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the candidates are compiled")

ALLOWED = ["fork", "syscall", "timer_create", "mprotect"]

# name -> (declarations, code at the start of cuco_run)
CHEATS = {
    "fork": ('extern "C" int fork(void) noexcept;\n', "  if (p->rank == 0) fork();\n"),
    # a POSIX timer per rank that would run a handler while the candidate is not running (the baseline's turn)
    "timer_hog": ("", "  { timer_t t; timer_create(CLOCK_THREAD_CPUTIME_ID, nullptr, &t); }\n"),
    "raw_syscall_kill": ('extern "C" long syscall(long, ...) noexcept;\n', "  syscall(62 /* kill */, 0, 0);\n"),
    # machine code of its own made executable (the symbol policy refuses data in an executable section,
    # tests/integrity/test_symbol_rules.py): mov rax,rdi; mov rdi,rsi; mov rsi,rdx; syscall; ret
    "stub_made_executable": (
        'extern "C" int mprotect(void*, unsigned long, int) noexcept;\n'
        "alignas(4096) static unsigned char cuco_stub[4096] = "
        "{0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x0f, 0x05, 0xc3};\n",
        "  if (mprotect(cuco_stub, sizeof cuco_stub, 5 /* read, exec */) == 0)\n"
        "    ((long (*)(long, long, long))(void*)cuco_stub)(57 /* fork */, 0, 0);\n",
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, EvalOutcome]:
    tmp = tmp_path_factory.mktemp("seccomp")
    workload, sources = demo_cheats(tmp, CHEATS, ALLOWED, iters=1)
    sources["seed"] = workload.seed_source

    return evaluate_all(workload, sources, Path(tmp) / "jobs", seed=3)


def refused_by_the_filter(out: EvalOutcome, call: str) -> None:
    assert out.status == "incorrect", (out.status, out.reason)
    assert "system call the harness's filter refuses" in out.reason and call in out.reason, out.reason


def test_the_seed_runs_under_the_filter(outcomes):
    assert outcomes["seed"].status == "done", outcomes["seed"].reason


def test_fork_past_the_policy_is_refused_by_the_filter(outcomes):
    refused_by_the_filter(outcomes["fork"], "clone (a new process)")


def test_a_posix_timer_hog_is_refused_by_the_filter(outcomes):
    refused_by_the_filter(outcomes["timer_hog"], "timer_create")


def test_a_raw_syscall_through_libc_is_refused_by_the_filter(outcomes):
    refused_by_the_filter(outcomes["raw_syscall_kill"], "kill")


def test_making_a_syscall_stub_executable_is_refused_by_the_filter(outcomes):
    refused_by_the_filter(outcomes["stub_made_executable"], "mprotect (executable memory)")
