"""`cuco analyze` reads the program its compiler reads: the real preprocessor with the user's -D/-U/-I (or
a compile_commands.json) decides every #if, locations stay the original file:line, the branches taken are
reported, and what cannot be read is named in one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuco_tui.cli import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the program corpus is not at {CORPUS}")

PROGRAM = """#include <cstdio>
#include <nccl.h>
#include <cuda_runtime.h>
#define CHECK(call) do {{ if ((call) != 0) return 1; }} while (0)
#define TRACE(name)
#ifdef USE_DOUBLE
typedef double real;
#else
typedef float real;
#endif
__global__ void scale(const real* in, real* out, int n) {{ int i = threadIdx.x; if (i < n) out[i] = 2 * in[i]; }}
{guard_open}
int main(int argc, char** argv) {{
  int rank = 0, nranks = 2;
  ncclUniqueId id;
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  real *x, *y;
  cudaMalloc(&x, 1024 * sizeof(real));
  cudaMalloc(&y, 1024 * sizeof(real));
  for (int it = 0; it < 10; ++it) {{
    TRACE("step")
#if SPLIT_ELSE
    if (argc > 5) {{
      scale<<<1, 1024, 0, s>>>(x, y, 1024);
    }} else
#endif
    {{
      scale<<<4, {{256, 1, 1}}, 0, s>>>(x, y, 1024);
    }}
    CHECK(ncclAllReduce(y, y, 1024, ncclFloat, ncclSum, comm, s));
  }}
  return 0;
}}
{guard_close}
"""


def _write(tmp_path, name="prog.cu", guard=("", "")) -> Path:
    path = tmp_path / name
    path.write_text(PROGRAM.format(guard_open=guard[0], guard_close=guard[1]))
    return path


def _analyze(capsys, *args) -> tuple[int, dict | None, str]:
    rc = main(["analyze", *map(str, args), "--json"])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_flags_decide_the_branches_and_locations_stay_original(tmp_path, capsys):
    path = _write(tmp_path)
    rc, d, err = _analyze(capsys, path)
    assert rc == 0, err
    taken = {b["directive"]: b["taken"] for b in d["preprocessing"]["branches"]}
    assert taken == {"#ifdef USE_DOUBLE": False, "#else": True, "#if SPLIT_ELSE": False}
    launches = [k for k in d["kernel_launches"] if k["in_region"]]
    assert [k["at"] for k in launches] == [f"{path}:{_line(path, 'scale<<<4')}"]
    assert launches[0]["block"] == "dim3(256, 1, 1)"  # the braced dim3, read as the same launch
    assert {b["name"]: b["elem_type"] for b in d["buffers"]} == {"x": "float", "y": "float"}
    rc, d, err = _analyze(capsys, path, "-DUSE_DOUBLE", "-DSPLIT_ELSE=1")
    assert rc == 0, err
    taken = {b["directive"]: b["taken"] for b in d["preprocessing"]["branches"]}
    assert taken["#ifdef USE_DOUBLE"] is True and taken["#if SPLIT_ELSE"] is True
    assert {b["name"]: b["elem_type"] for b in d["buffers"]} == {"x": "double", "y": "double"}
    assert [k["at"] for k in d["kernel_launches"] if k["in_region"]] == [
        f"{path}:{_line(path, 'scale<<<1')}",
        f"{path}:{_line(path, 'scale<<<4')}",
    ]
    assert d["preprocessing"]["flags"]["defines"] == ["USE_DOUBLE", "SPLIT_ELSE=1"]


def test_compile_commands_give_each_file_its_flags(tmp_path, capsys):
    path = _write(tmp_path)
    inc = tmp_path / "inc"
    inc.mkdir()
    db = tmp_path / "compile_commands.json"
    db.write_text(
        json.dumps(
            [
                {
                    "directory": str(tmp_path),
                    "file": "prog.cu",
                    "command": "nvcc -DUSE_DOUBLE -I inc -c prog.cu -o prog.o",
                }
            ]
        )
    )
    rc, d, err = _analyze(capsys, path, "--compile-commands", db)
    assert rc == 0, err
    assert {b["name"]: b["elem_type"] for b in d["buffers"]} == {"x": "double", "y": "double"}
    rc, _, err = _analyze(capsys, path, "--compile-commands", tmp_path / "none.json")
    assert rc == 2 and "none.json" in err and "compile_commands.json" in err
    db.write_text(json.dumps([{"directory": str(tmp_path), "file": "other.cu", "command": "nvcc -c other.cu"}]))
    rc, _, err = _analyze(capsys, path, "--compile-commands", db)
    assert rc == 2 and f"no entry compiles {path}" in err


@pytest.mark.parametrize(
    "guard, flags, fix",
    [
        (("#ifdef RUN_MAIN", "#endif"), [], "set -DRUN_MAIN"),
        (("#ifndef TESTING", "#endif"), ["-DTESTING"], "set -UTESTING"),
    ],
)
def test_main_under_an_inactive_if_names_the_flag(tmp_path, capsys, guard, flags, fix):
    path = _write(tmp_path, guard=guard)
    rc, _, err = _analyze(capsys, path, *flags)
    assert rc == 2
    assert err.startswith(f"cuco: {path}:{_line(path, 'int main')}: ")
    assert f"main() sits under an inactive `{guard[0]}` ({path}:{_line(path, guard[0])})" in err and fix in err
    assert err.count("\n") == 1


def test_every_unreadable_place_in_one_run(tmp_path, capsys):
    path = tmp_path / "bad.cu"
    path.write_text("#include <nccl.h>\nint main() {\n  int x = (1;\n  float y = 2 +;\n  return 0;\n}\n")
    rc, _, err = _analyze(capsys, path)
    assert rc == 2 and err.count("\n") == 1
    assert "cuco's parser does not support" in err and f"{path}:3" in err and f"{path}:4" in err
    assert "fix the syntax" not in err


def test_preprocessor_error_names_the_place(tmp_path, capsys):
    path = _write(tmp_path)
    path.write_text(path.read_text().replace("typedef double real;", "#error double is not supported"))
    rc, _, err = _analyze(capsys, path, "-DUSE_DOUBLE")
    assert rc == 2
    assert err.startswith(f"cuco: {path}:{_line(path, '#error')}: ") and "double is not supported" in err


@needs_corpus
def test_jacobi_reads_as_its_makefile_builds_it(capsys):
    """NVIDIA's Jacobi: `#if NCCL_UB_SUPPORT` splits an if/else, statement macros end without `;`, the
    kernel launch uses a braced dim3; the NCCL version decides the branch as the compiler would."""
    d = CORPUS / "nvidia_jacobi_nccl"
    rc, got, err = _analyze(capsys, d / "jacobi.cpp", d / "jacobi_kernels.cu", "-DUSE_NVTX", "-DHAVE_CUB")
    assert rc == 0, err
    taken = {(b["at"].rsplit(":", 1)[1], b["directive"]): b["taken"] for b in got["preprocessing"]["branches"]}
    assert taken[("60", "#ifdef USE_NVTX")] is True and taken[("251", "#if NCCL_UB_SUPPORT")] is True
    assert taken[("30", "#ifdef HAVE_CUB")] is True
    assert got["region"]["at"].endswith("jacobi.cpp:332") and got["region"]["kind"] == "while"
    sends = [c for c in got["nccl_calls"] if c["in_region"] and c["name"] in ("ncclSend", "ncclRecv")]
    assert [c["at"].rsplit(":", 1)[1] for c in sends] == ["352", "353", "354", "355"]
