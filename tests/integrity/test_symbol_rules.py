"""Symbol rules that name what cannot be replaced (engine/symbol_policy.py): no definition of operator
new/delete or of a name the C/C++ runtime exports, weak or COMDAT; no data in an executable section.
Each candidate is a legal EVOLVE-BLOCK edit of the demo seed, compiled by the real g++ with the demo's
flags; the policy reads the real object.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from engine import blocks, symbol_policy
from engine.workload import load_workload

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the candidates are compiled")

RUN_HEAD = 'extern "C" int cuco_run(const cuco_problem* p) {\n'

# What the rules must let through: a C++17 inline variable (a GNU unique symbol in a COMDAT group), which every
# CUB or Thrust header defines (libcu++'s customization point objects)
LEGAL = {
    "inline_variable": (
        "namespace cuco_lib { struct Tag { int id; }; inline constexpr Tag tag{7}; }\n"
        "static const void* volatile cuco_keep_tag = &cuco_lib::tag;\n",
        "",
    ),
}

CHEATS = {
    # an inline operator new whose address is taken: a weak COMDAT `_Znwm` that wins the link, and then
    # serves libstdc++'s and the harness's allocations, before the harness counts its threads
    "inline_operator_new": (
        "inline void* operator new(unsigned long n) { return __builtin_malloc(n); }\n"
        "static void* (*volatile cuco_keep)(unsigned long) = &::operator new;\n",
        "",
    ),
    "operator_delete": ("void operator delete(void* q) noexcept { __builtin_free(q); }\n", ""),
    # a weak definition of a libstdc++ export (std::terminate): COMDAT-looking, but a library's name
    "weak_libstdcxx_name": ("namespace std { __attribute__((weak)) void terminate() noexcept { for (;;) {} } }\n", ""),
    # machine code in a const array in a .text.* section: runs as a syscall stub with no `asm`
    # the harness's untimed hook of an init-made workload (the baseline's start of the carried outputs):
    # defined by a candidate, it would run work before every call outside the timing
    "untimed_hook": ('extern "C" int cuco_baseline_start_outputs(void*) { return 0; }\n', ""),
    "data_in_text": (
        '__attribute__((section(".text.cuco_stub"))) static const unsigned char cuco_stub[] = '
        "{0x48, 0x89, 0xf8, 0x0f, 0x05, 0xc3};\n",
        "  if (p->rank == 99) ((long (*)(long))(const void*)cuco_stub)(39);\n",
    ),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, symbol_policy.Verdict]:
    workload = load_workload("demo")
    seed = workload.seed_source
    build = workload.build_command
    work = tmp_path_factory.mktemp("symbols")
    for name in workload.harness_files:
        dest = work / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(workload.harness_files[name])
    sources = {"seed": seed}
    for name, (decls, head) in {**CHEATS, **LEGAL}.items():
        sources[name] = seed.replace(RUN_HEAD, decls + RUN_HEAD + head)
        blocks.validate_child(seed, sources[name])
    out = {}
    for name, src in sources.items():
        (work / workload.candidate_name).write_text(src)
        cmd = build.replace("{sources}", "-c " + shlex.quote(workload.candidate_name)).replace("{binary}", f"{name}.o")
        r = subprocess.run(cmd, shell=True, cwd=work, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (name, r.stderr[-2000:])
        out[name] = symbol_policy.check((work / f"{name}.o").read_bytes(), workload)
    return out


def test_the_seed_passes(verdicts):
    assert verdicts["seed"].ok, verdicts["seed"].reason


def test_an_inline_variable_passes(verdicts):
    v = verdicts["inline_variable"]
    assert v.ok, v.reason


def test_an_inline_operator_new_is_refused(verdicts):
    v = verdicts["inline_operator_new"]
    assert not v.ok and "`_Znwm` (operator new or delete)" in v.reason, v.reason


def test_operator_delete_is_refused(verdicts):
    v = verdicts["operator_delete"]
    assert not v.ok and "`_ZdlPv` (operator new or delete)" in v.reason, v.reason


def test_a_weak_definition_of_a_runtime_export_is_refused(verdicts):
    v = verdicts["weak_libstdcxx_name"]
    if "_ZSt9terminatev" not in symbol_policy.library_exports():
        pytest.skip("no libstdc++.so.6 found in the usual directories: the export list is empty here")
    assert not v.ok and "`_ZSt9terminatev`, a name the C or C++ runtime exports" in v.reason, v.reason


def test_data_in_an_executable_section_is_refused(verdicts):
    v = verdicts["data_in_text"]
    assert not v.ok and "data (`_ZL9cuco_stub`) in an executable section (`.text.cuco_stub`)" in v.reason, v.reason


def test_a_candidate_defining_the_harness_untimed_hook_is_refused(verdicts):
    v = verdicts["untimed_hook"]
    assert not v.ok and "cuco_baseline_start_outputs" in v.reason, v.reason


def test_every_shipped_demo_variant_still_passes(tmp_path):
    """What the rules must not refuse: the demo's variants use std::thread, lambdas and std::atomic."""
    from engine.blocks import replace_blocks

    workload = load_workload("demo")
    for name in workload.harness_files:
        dest = tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(workload.harness_files[name])
    for v in workload.design_space.variants:
        (tmp_path / workload.candidate_name).write_text(replace_blocks(workload.seed_source, v.bodies))
        cmd = workload.build_command.replace("{sources}", "-c " + workload.candidate_name).replace("{binary}", "v.o")
        subprocess.run(cmd, shell=True, cwd=tmp_path, check=True, capture_output=True, timeout=120)
        verdict = symbol_policy.check((tmp_path / "v.o").read_bytes(), workload)
        assert verdict.ok, (v.name, verdict.reason)
