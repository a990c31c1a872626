"""The policy is data: a workload extends it in its workload.yaml, and a bad extension is an input error
naming the file and the field (real g++ objects, the real loader)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from engine import symbol_policy
from engine.workload import load_workload
from remote.errors import InputError

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: objects are compiled")


def obj(tmp_path, code: str) -> bytes:
    (tmp_path / "c.cpp").write_text(code)
    subprocess.run(["g++", "-O2", "-c", "c.cpp", "-o", "c.o"], cwd=tmp_path, check=True, timeout=120)
    return (tmp_path / "c.o").read_bytes()


def with_policy(workload_dir, text: str):
    yaml_file = workload_dir / "workload.yaml"
    yaml_file.write_text(yaml_file.read_text() + "\npolicy:\n" + text)
    return load_workload(str(workload_dir))


def test_a_workload_may_allow_a_call_the_shipped_policy_refuses(tmp_path, demo_copy):
    code = 'extern "C" char* getenv(const char*) noexcept;\nextern "C" int cuco_run(const void*) { return getenv("X") != 0; }\n'
    shipped = symbol_policy.check(obj(tmp_path, code), load_workload(str(demo_copy)))
    assert not shipped.ok and "candidate calls `getenv` (the environment)" in shipped.reason
    extended = with_policy(demo_copy, "  allow: [getenv]\n")
    assert symbol_policy.check(obj(tmp_path, code), extended).ok


def test_a_workload_may_define_more_abi_names(tmp_path, demo_copy):
    code = 'extern "C" int cuco_run(const void*) { return 0; }\nextern "C" int cuco_extra_hook(void) { return 1; }\n'
    assert (
        "candidate defines `cuco_extra_hook`"
        in symbol_policy.check(obj(tmp_path, code), load_workload(str(demo_copy))).reason
    )
    assert symbol_policy.check(obj(tmp_path, code), with_policy(demo_copy, '  define: ["cuco_extra_*"]\n')).ok


def test_an_unknown_policy_key_is_an_input_error_naming_file_and_field(demo_copy):
    with pytest.raises(InputError) as err:
        with_policy(demo_copy, "  deny: [printf]\n")
    assert "workload.yaml" in str(err.value) and "policy.deny" in str(err.value)


def test_a_policy_list_of_non_strings_is_an_input_error(demo_copy):
    with pytest.raises(InputError) as err:
        with_policy(demo_copy, "  allow: [1, 2]\n")
    assert "policy.allow" in str(err.value)
