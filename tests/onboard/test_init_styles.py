"""Programs in the styles users write, each through `cuco analyze`, `cuco init` and `cuco validate` with no
hand edit: a region checked by the program's own two-argument functions (and a host helper computing its
launch shape), an implementation picked from a table of function pointers across three files (its
collective in a helper of a third file), a timed loop whose index feeds the kernels, and flags that come
from a Makefile and from a compile_commands.json. Also what `cuco validate` says when the seed does not
build, and where it says it looked for NCCL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cuco_tui.cli import main
from tests.onboard.toolchain import compiles_with_nccl

PROGRAMS = Path(__file__).parent / "programs"
COMPILES = compiles_with_nccl("the workload's compile is not checked here")


def _run(capsys, *args) -> tuple[int, str, str]:
    rc = main(list(map(str, args)))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _init(capsys, monkeypatch, folder: Path, *args) -> tuple[int, str]:
    """`cuco init ARGS` from `folder` (the program's own): what it printed, once it succeeded."""
    monkeypatch.chdir(folder)
    rc, text, err = _run(capsys, "init", *args)
    assert rc == 0, err
    return rc, text


def _validates(capsys, workload: Path, home: Path) -> str:
    rc, text, _ = _run(capsys, "validate", workload, "--home", home)
    assert rc == 0, text
    assert "compiled seed" in text and "passes the symbol policy" in text and "workload OK" in text
    assert len(text.splitlines()) < 40
    return text


@COMPILES
def test_check_functions_map_to_the_harness_and_helpers_are_carried(capsys, monkeypatch, tmp_path):
    """check(cudaMalloc(...), "what") and check_nccl(...) are the program's functions (not macros): the
    workload re-defines them to hand a failed status to the harness (a note says so); the host helper
    shape_for(), the struct it returns, the constant and the file-scope variable it reads are carried."""
    out = tmp_path / "w"
    _, text = _init(capsys, monkeypatch, PROGRAMS, "check_helper.cu", "-o", out)
    assert "check() checks a CUDA/NCCL status" in text and "check_nccl() checks a CUDA/NCCL status" in text
    cand = (out / "candidate.cu").read_text()
    assert "CUCO-TODO" not in cand
    assert "#define check(...)" in cand and "#define check_nccl(...)" in cand
    assert "static void check(" not in cand  # its body (MPI_Abort) is not the harness's way
    assert "static LaunchShape shape_for(size_t n)" in cand and "static const int kThreads = 128;" in cand
    assert "struct LaunchShape {\n  int blocks;\n  int threads;\n};" in cand
    assert cand.index("struct LaunchShape") < cand.index("static LaunchShape shape_for")  # dependency order
    assert "shape = shape_for(n);" in cand.split("int setup() {")[1]
    _validates(capsys, out, tmp_path / "home")


@COMPILES
def test_a_table_of_implementations_across_three_files(capsys, monkeypatch, tmp_path):
    """main() calls impls[kChosen](...), the table is in impls.cu, kChosen is 1: the analysis follows
    run_cubes, whose all-reduce is in reduce_all() of comm.cu; init calls run_cubes directly and carries
    both helpers, with compute-only and comm-only forms (the overlap bound, the skip_comm check)."""
    folder = PROGRAMS / "table"
    monkeypatch.chdir(folder)
    rc, text, err = _run(capsys, "analyze", "main.cu", "impls.cu", "comm.cu", "--json")
    assert rc == 0, err
    data = json.loads(text)
    (d,) = data["dispatches"]
    assert d["through"] == "impls[kChosen]" and d["target"] == "run_cubes" and d["at"] == "main.cu:39"
    assert [c["name"] for c in d["candidates"]] == ["run_squares", "run_cubes"]
    (call,) = [c for c in data["nccl_calls"] if c["name"] == "ncclAllReduce"]
    assert call["at"] == "comm.cu:6" and call["in_region"] and call["called_from"] == ["main.cu:39", "impls.cu:34"]
    region = [k["name"] for k in data["kernel_launches"] if k["in_region"]]
    assert region == ["cube_kernel", "finish_kernel"]

    out = tmp_path / "w"
    _, text = _init(capsys, monkeypatch, folder, "main.cu", "impls.cu", "comm.cu", "-o", out)
    assert "main.cu:39: a call through impls[kChosen]" in text
    cand = (out / "candidate.cu").read_text()
    assert "run_cubes(in, partial, out, n, comm, stream);" in cand.split("int run() {")[1]
    assert "impl_fn impls[]" not in cand and "static void reduce_all(" in cand
    baseline = (out / "baseline.cu").read_text()
    compute = baseline.split("static void run_cubes_cuco_compute(")[1].split("\n}")[0]
    assert "reduce_all_cuco_compute(partial, n, comm, stream);" in compute
    _validates(capsys, out, tmp_path / "home")


def test_a_table_chosen_at_run_time_lists_the_candidates_and_entry_picks(capsys, monkeypatch, tmp_path):
    folder = tmp_path / "table"
    shutil.copytree(PROGRAMS / "table", folder)
    main_cu = folder / "main.cu"
    main_cu.write_text(main_cu.read_text().replace("impls[kChosen]", "impls[argc > 1 ? atoi(argv[1]) : 0]"))
    monkeypatch.chdir(folder)
    rc, _, err = _run(capsys, "analyze", "main.cu", "impls.cu", "comm.cu")
    assert rc == 2 and err.count("\n") == 1
    assert "main.cu:39" in err and "run_squares (impls.cu:38), run_cubes (impls.cu:38)" in err and "--entry" in err
    rc, text, err = _run(capsys, "analyze", "main.cu", "impls.cu", "comm.cu", "--entry", "run_squares", "--json")
    assert rc == 0, err
    data = json.loads(text)
    assert data["dispatches"][0]["target"] == "run_squares" and data["dispatches"][0]["how"] == "--entry"
    assert [k["name"] for k in data["kernel_launches"] if k["in_region"]] == ["square_kernel", "finish_kernel"]


@COMPILES
def test_the_loop_index_is_the_harness_call_index(capsys, monkeypatch, tmp_path):
    """The timed loop's `step` feeds both kernels: each call of the workload takes the harness's call index
    (ctx->iteration) within the loop's range, and the check's reference run takes the same one."""
    out = tmp_path / "w"
    _, text = _init(capsys, monkeypatch, PROGRAMS, "loop_index.cu", "-o", out)
    assert "TODO" not in text and "the loop variable step is used inside the region" in text
    run = (out / "candidate.cu").read_text().split("int run() {")[1].split("\n  }")[0]
    assert "const int step = 0 + (int)((long long)cuco_c->iteration % " in run and "(steps)" in run
    assert "ref->iteration = ctx->iteration" in (out / "problem.cu").read_text()
    _validates(capsys, out, tmp_path / "home")


@COMPILES
def test_flags_from_a_makefile_are_diagnosed_and_kept(capsys, monkeypatch, tmp_path):
    """halo.cu's Makefile passes -DUSE_NVTX -DSCALE=3 and links -lnvToolsExt -lcublas: init undefines
    USE_NVTX (named, with why), keeps SCALE for the workload's build (its kernel uses it), and names
    the library the harness cannot link."""
    out = tmp_path / "w"
    _, text = _init(capsys, monkeypatch, PROGRAMS / "makefile_flags", "halo.cu", "--makefile", "Makefile", "-o", out)
    flags = [line for line in text.splitlines() if line.startswith("  flags ")]
    assert any("halo.cu:7: -DUSE_NVTX turns on NVTX profiler ranges" in f and "-UUSE_NVTX" in f for f in flags)
    assert any("-lcublas" in f and "cannot link" in f for f in flags)
    assert not any("-lineinfo" in f or "-lnccl" in f or "-lmpi" in f for f in flags)
    cand = (out / "candidate.cu").read_text()
    assert "#define SCALE 3" in cand and "nvtx" not in cand.lower()
    assert "-DUSE_NVTX" in (out / "workload.yaml").read_text().split("name:")[0]  # the notes, in its head
    _validates(capsys, out, tmp_path / "home")


@COMPILES
def test_flags_from_compile_commands_are_read_and_diagnosed(capsys, monkeypatch, tmp_path):
    out = tmp_path / "w"
    folder = PROGRAMS / "compile_db"
    _, text = _init(capsys, monkeypatch, folder, "reduce.cu", "--compile-commands", "compile_commands.json", "-o", out)
    assert "-DTIME_WITH_MPI pulls in MPI" in text
    cand = (out / "candidate.cu").read_text()
    assert "typedef double real;" in cand and "#define NCCL_REAL ncclDouble" in cand
    _validates(capsys, out, tmp_path / "home")


@COMPILES
def test_validate_stops_at_a_seed_that_does_not_build(capsys, monkeypatch, tmp_path):
    """Every variant shares the seed's code: a seed that does not build is reported in one line per
    distinct error, with the full log on disk, and no variant is built."""
    out = tmp_path / "w"
    _init(capsys, monkeypatch, PROGRAMS, "check_helper.cu", "-o", out)  # one variant: graph_replay
    cand = out / "candidate.cu"
    cand.write_text(cand.read_text().replace("int run() {", "int run() {\n    undefined_a = 1; undefined_b = 2;", 1))
    rc, text, _ = _run(capsys, "validate", out, "--home", tmp_path / "home")
    assert rc == 1
    assert "compile failed seed" in text and "2 distinct error(s)" in text
    assert 'identifier "undefined_a" is undefined' in text and 'identifier "undefined_b" is undefined' in text
    assert "variants not built: they share the seed's code" in text
    flat = text.replace("\n", "")
    log = Path(flat.split("(full log: ", 1)[1].split(")", 1)[0])
    assert log.name == "seed.log" and "undefined_a" in log.read_text() and out not in log.parents
    shutil.rmtree(log.parent)
    assert len(text.splitlines()) < 40


def test_validate_names_where_it_looked_for_nccl(capsys, monkeypatch, tmp_path):
    """An NCCL under /tmp (a virtual environment there, say) is not seen by build jobs, which have their own
    /tmp: validate says so, and where it looked, instead of "not found"."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: validate stops before it looks for NCCL")
    nccl = Path("/tmp") / f"cuco-test-nccl-{tmp_path.name}"
    (nccl / "include").mkdir(parents=True, exist_ok=True)
    (nccl / "include" / "nccl.h").write_text("")
    try:
        out = tmp_path / "w"
        _init(capsys, monkeypatch, PROGRAMS, "loop_index.cu", "-o", out)
        monkeypatch.setenv("NCCL_HOME", str(nccl))
        rc, text, _ = _run(capsys, "validate", out)
        flat = " ".join(text.split())
        assert rc == 0 and f"NCCL_HOME={nccl}" in flat and "private /tmp" in flat and "nothing was compiled" in flat
    finally:
        shutil.rmtree(nccl, ignore_errors=True)


def test_the_workload_finds_the_harness_wherever_it_is_moved(capsys, monkeypatch, tmp_path):
    out = tmp_path / "w"
    _init(capsys, monkeypatch, PROGRAMS, "loop_index.cu", "-o", out)
    assert "cuco:_harness/cuda/harness.cu" in (out / "workload.yaml").read_text()
    moved = tmp_path / "elsewhere" / "deeper" / "w"
    moved.parent.mkdir(parents=True)
    shutil.move(out, moved)
    rc, text, _ = _run(capsys, "validate", moved, "--no-compile")
    assert rc == 0 and "spec OK" in text


def test_a_std_function_initialised_with_a_function_is_followed(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(PROGRAMS)
    rc, text, err = _run(capsys, "analyze", "std_function.cu", "--json")
    assert rc == 0, err
    data = json.loads(text)
    assert [(d["through"], d["target"]) for d in data["dispatches"]] == [("step", "step_sum")]
    assert [c["name"] for c in data["nccl_calls"] if c["in_region"]] == ["ncclAllReduce"]
    out = tmp_path / "w"
    _init(capsys, monkeypatch, PROGRAMS, "std_function.cu", "-o", out)
    assert "step_sum(x, y, n, comm, s);" in (out / "candidate.cu").read_text().split("int run() {")[1]


def test_a_lambda_is_followed_where_it_is_called_and_init_says_what_to_do(capsys, monkeypatch, tmp_path):
    """The lambda's kernels and all-reduce run where the loop calls it (its pointer parameters bound to the
    loop's buffers), not where it is written; init carries functions, and says so in one line."""
    monkeypatch.chdir(PROGRAMS)
    rc, text, err = _run(capsys, "analyze", "lambda_step.cu", "--json")
    assert rc == 0, err
    data = json.loads(text)
    ops = [(k["name"], k["in_region"], k.get("called_from")) for k in data["kernel_launches"] + data["nccl_calls"]]
    assert all(in_region and called_from == ["lambda_step.cu:32"] for _, in_region, called_from in ops)
    assert {b["name"]: b["role"] for b in data["buffers"]}["y"] == "output"
    rc, _, err = _run(capsys, "init", "lambda_step.cu", "-o", tmp_path / "w")
    assert rc == 2 and err.count("\n") == 1 and "inside a lambda (step at lambda_step.cu:32)" in err
    assert not (tmp_path / "w").exists()


@COMPILES
def test_a_header_given_with_the_files_is_carried_in_dependency_order(capsys, monkeypatch, tmp_path):
    """shared.h (a struct, a constant, an inline helper, the wrappers' prototypes) given after the .cu files
    that use it: its code is carried before what uses it, its #include line left out; not given, init
    names it at each include."""
    folder = PROGRAMS / "header_types"
    out = tmp_path / "w"
    _, text = _init(capsys, monkeypatch, folder, "main.cu", "kernels.cu", "shared.h", "-o", out)
    assert "not among the files given" not in text
    cand = (out / "candidate.cu").read_text()
    assert '#include "shared.h"' not in cand
    assert cand.index("static const float kDecay") < cand.index("__global__ void decay_kernel")
    assert cand.index("struct Geometry {") < cand.index("static void launch_decay(const float* in")
    _validates(capsys, out, tmp_path / "home")
    _, text = _init(capsys, monkeypatch, folder, "main.cu", "kernels.cu", "-o", tmp_path / "w2")
    assert "main.cu:6: shared.h is your program's header but not among the files given" in text


VIRTUAL_FILES = ("main.cu", "impls.cu", "comm.cu", "reducer.h")


@COMPILES
def test_a_virtual_method_runs_the_override_the_factory_makes(capsys, monkeypatch, tmp_path):
    """main() calls impl->run(...) on what make_reducer() (impls.cu) returns, always a CubeReducer: the
    analysis follows CubeReducer::run, whose all-reduce is in reduce_all() of comm.cu; init calls the
    override as a free function (the object is not made), carries its helper, with compute-only and
    comm-only forms, and the workload validates as written."""
    folder = PROGRAMS / "virtual"
    monkeypatch.chdir(folder)
    rc, text, err = _run(capsys, "analyze", *VIRTUAL_FILES, "--json")
    assert rc == 0, err
    data = json.loads(text)
    (d,) = data["dispatches"]
    assert d["through"] == "impl->run" and d["target"] == "CubeReducer::run" and d["at"] == "main.cu:37"
    assert d["candidates"] == [
        {"name": "SquareReducer::run", "at": "impls.cu:19"},
        {"name": "CubeReducer::run", "at": "impls.cu:27"},
    ]
    assert "made by make_reducer(), which returns only a CubeReducer (impls.cu:35)" in d["how"]
    (call,) = [c for c in data["nccl_calls"] if c["name"] == "ncclAllReduce"]
    assert call["in_region"] and call["called_from"] == ["main.cu:37", "impls.cu:31"]
    assert [k["name"] for k in data["kernel_launches"] if k["in_region"]] == ["cube_kernel", "finish_kernel"]

    out = tmp_path / "w"
    _, text = _init(capsys, monkeypatch, folder, *VIRTUAL_FILES, "-o", out)
    assert "main.cu:37: a call through impl->run" in text and "TODO" not in text
    cand = (out / "candidate.cu").read_text()
    assert "CubeReducer__run(in, partial, out, n, comm, stream);" in cand.split("int run() {")[1]
    assert "static void CubeReducer__run(const float* in" in cand and "static void reduce_all(" in cand
    assert "make_reducer()" not in cand.split("int setup() {")[1] and "SquareReducer::run(" not in cand
    baseline = (out / "baseline.cu").read_text()
    compute = baseline.split("static void CubeReducer__run_cuco_compute(")[1].split("\n}")[0]
    assert "reduce_all_cuco_compute(partial, n, comm, stream);" in compute
    _validates(capsys, out, tmp_path / "home")


def _virtual_copy(tmp_path, old: str, new: str) -> Path:
    folder = tmp_path / "virtual"
    shutil.copytree(PROGRAMS / "virtual", folder)
    main_cu = folder / "main.cu"
    assert old in main_cu.read_text()
    main_cu.write_text(main_cu.read_text().replace(old, new))
    return folder


def test_a_virtual_call_on_an_object_bound_by_reference_runs_its_class(capsys, monkeypatch, tmp_path):
    folder = _virtual_copy(
        tmp_path,
        "std::unique_ptr<Reducer> impl = make_reducer();",
        "SquareReducer square; Reducer& impl = square;",
    )
    (folder / "main.cu").write_text((folder / "main.cu").read_text().replace("impl->run(", "impl.run("))
    monkeypatch.chdir(folder)
    rc, text, err = _run(capsys, "analyze", *VIRTUAL_FILES, "--json")
    assert rc == 0, err
    (d,) = json.loads(text)["dispatches"]
    assert d["target"] == "SquareReducer::run" and "square is a SquareReducer" in d["how"]


def test_a_virtual_call_chosen_at_run_time_lists_the_overrides_and_entry_picks(capsys, monkeypatch, tmp_path):
    folder = _virtual_copy(
        tmp_path,
        "std::unique_ptr<Reducer> impl = make_reducer();",
        "std::unique_ptr<Reducer> impl = argc > 1 ? std::unique_ptr<Reducer>(new SquareReducer()) : make_reducer();",
    )
    monkeypatch.chdir(folder)
    rc, _, err = _run(capsys, "analyze", *VIRTUAL_FILES)
    assert rc == 2 and err.count("\n") == 1
    assert "main.cu:37" in err and "SquareReducer::run (impls.cu:19), CubeReducer::run (impls.cu:27)" in err
    assert "--entry" in err
    rc, text, err = _run(capsys, "analyze", *VIRTUAL_FILES, "--entry", "SquareReducer::run", "--json")
    assert rc == 0, err
    data = json.loads(text)
    assert data["dispatches"][0]["target"] == "SquareReducer::run" and data["dispatches"][0]["how"] == "--entry"
    assert [k["name"] for k in data["kernel_launches"] if k["in_region"]] == ["square_kernel", "finish_kernel"]
