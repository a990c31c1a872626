"""`cuco analyze` and `cuco init` on real programs written by others (../shared/corpus/, read at run time):
the analysis matches a golden file reviewed by hand against the corpus's READING.md (the region, the calls
in order with their buffers, the wrapper launches, the carried buffers), and init refuses in one line,
exit 2, what it cannot write (no kernel, one process driving every GPU, a communicator and nothing else)."""

from __future__ import annotations

import json

import pytest

from cuco_tui.cli import main
from tests.onboard.corpus import CORPUS, GOLDENS, INIT_FLAGS, PROGRAMS, comparable
from tests.onboard.toolchain import compiles_with_nccl

COMPILES = compiles_with_nccl("the compile is not checked here")

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"the program corpus is not at {CORPUS}")


def _run(capsys, *args) -> tuple[int, str, str]:
    rc = main(list(map(str, args)))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_analysis_matches_the_reviewed_golden(name, capsys, monkeypatch):
    files, flags, _ = PROGRAMS[name]
    monkeypatch.chdir(CORPUS)
    rc, out, err = _run(capsys, "analyze", *files, *flags, "--json")
    assert rc == 0, err
    assert comparable(json.loads(out)) == json.loads((GOLDENS / f"{name}.json").read_text())


def _in_region(d: dict) -> list[dict]:
    ops = [o for k in ("nccl_calls", "kernel_launches", "memory_ops", "mpi_calls") for o in d[k] if o["in_region"]]
    return sorted(ops, key=lambda o: int(o["id"][2:]))


def test_jacobi_facts(capsys, monkeypatch):
    """What READING.md says of NVIDIA's Jacobi, spelled out (the golden file holds it all)."""
    files, flags, _ = PROGRAMS["nvidia_jacobi_nccl"]
    monkeypatch.chdir(CORPUS)
    d = json.loads(_run(capsys, "analyze", *files, *flags, "--json")[1])
    assert d["region"]["at"] == "nvidia_jacobi_nccl/jacobi.cpp:332" and d["region"]["timed"]
    assert d["region"]["alternatives"] == [
        {"at": "nvidia_jacobi_nccl/jacobi.cpp:301", "what": "warm-up: untimed, before the timed loop"}
    ]
    seq = [o["name"] for o in _in_region(d)]
    assert seq == [
        "cudaMemsetAsync",
        "jacobi_kernel",
        "cudaMemcpyAsync",
        "ncclGroupStart",
        "ncclRecv",
        "ncclSend",
        "ncclRecv",
        "ncclSend",
        "ncclGroupEnd",
        "MPI_Allreduce",
    ]
    kernel = next(o for o in _in_region(d) if o["name"] == "jacobi_kernel")
    assert kernel["via"]["wrapper"] == "launch_jacobi_kernel"
    assert kernel["via"]["launches"][0]["at"] == "nvidia_jacobi_nccl/jacobi_kernels.cu:113"
    assert (kernel["reads"], kernel["writes"], kernel["stream"]) == (
        ["a", "l2_norm_d"],
        ["a_new", "l2_norm_d"],
        "compute_stream",
    )
    assert {b["name"]: b["role"] for b in d["buffers"]}["a"] == "carried"
    assert {b["name"]: b["role"] for b in d["buffers"]}["a_new"] == "carried"
    memcpy = next(o for o in _in_region(d) if o["name"] == "cudaMemcpyAsync")
    assert memcpy["when"] == ["(calculate_norm)"]


def test_helpers_are_followed(capsys, monkeypatch):
    monkeypatch.chdir(CORPUS)
    d = json.loads(_run(capsys, "analyze", *PROGRAMS["cuco_moe_seed"][0], "--json")[1])
    assert d["region"]["kind"] == "section" and d["region"]["at"] == "cuco_moe_seed/ds_v3_moe.cu:243"
    assert [o["name"] for o in _in_region(d)] == [
        "ncclAlltoAll",
        "dequantizeBlockScale",
        "tiledMatmul",
        "swiGLU",
        "tiledMatmul",
        "ncclAlltoAll",
    ]
    assert all(o["called_from"] == ["cuco_moe_seed/ds_v3_moe.cu:372"] for o in _in_region(d))
    d = json.loads(_run(capsys, "analyze", *PROGRAMS["async_ring_allreduce_single"][0], "--json")[1])
    assert d["ranks"]["source"] == "environment" and d["communicators"][0]["id_exchange"] == "file"
    assert d["region"]["at"].endswith(":158")
    assert d["region"]["alternatives"][0]["what"].startswith("size sweep")
    add = next(o for o in _in_region(d) if o["name"] == "add_vectors")
    assert (add["reads"], add["writes"]) == (["d_recv", "scratch_buff"], ["d_recv"])  # dest_ptr = recvbuff + off
    assert add["loops"][0]["iterations"] == "nranks-1"


@pytest.mark.parametrize(
    "name, words",
    [
        ("nccl_examples_allreduce", "no kernel launch"),
        ("nccl_examples_ring", "no kernel launch"),
        ("nccl_examples_mpi_comm", "makes no NCCL communication call"),
    ],
)
def test_init_refuses_what_has_nothing_to_overlap(name, words, capsys, monkeypatch, tmp_path):
    files, flags, has_kernel = PROGRAMS[name]
    assert not has_kernel
    monkeypatch.chdir(CORPUS)
    rc, out, err = _run(capsys, "init", *files, *flags, "-o", tmp_path / "w")
    assert rc == 2 and words in err and err.count("\n") == 1 and out == ""
    assert not (tmp_path / "w").exists()


def _inits(capsys, monkeypatch, name: str, out, flags: list[str] | None = None) -> str:
    """`cuco init` on a corpus program (with its own flags unless given), from the corpus folder: what
    it printed, once it succeeded."""
    files, own_flags, _ = PROGRAMS[name]
    monkeypatch.chdir(CORPUS)
    rc, text, err = _run(capsys, "init", *files, *(own_flags if flags is None else flags), "-o", out)
    assert rc == 0, err
    return text


def _validates_as_written(capsys, workload, home) -> None:
    rc, text, _ = _run(capsys, "validate", workload, "--home", home)
    assert rc == 0, text
    assert "compiled seed" in text and "passes the symbol policy" in text and "workload OK" in text


@COMPILES
@pytest.mark.parametrize("name", ["nvidia_jacobi_nccl", "nvidia_jacobi_nccl_overlap"])
def test_init_then_validate_with_no_hand_edit(name, capsys, monkeypatch, tmp_path):
    """NVIDIA's Jacobi as its authors wrote it: init writes a workload with no CUCO-TODO (nx, ny from the
    command line become config params; the wrapper launch_jacobi_kernel is carried; a and a_new start
    from the program's own memset and boundary kernel) and cuco validate accepts it as written."""
    out = tmp_path / name
    text = _inits(capsys, monkeypatch, name, out, INIT_FLAGS[name])
    assert "TODO" not in text and "CUCO-TODO" not in (out / "candidate.cu").read_text()
    workload = (out / "workload.yaml").read_text()
    assert "nx: 16384" in workload and "ny: 16384" in workload
    # a and a_new's starting value is set before every call by the frozen baseline, outside the timing (the
    # program sets it once before its timed loop): run() is the iteration alone
    run = (out / "candidate.cu").read_text().split("int run() {")[1].split("\n  }")[0]
    assert "a = (float*)cuco_c->outputs[0].ptr;" in run and "cudaMemset(a," not in run
    assert "launch_initialize_boundaries" not in run and "cudaDeviceSynchronize" not in run
    baseline = (out / "baseline.cu").read_text()
    start = baseline.split("int start_outputs() {")[1].split("\n  }")[0]
    assert "cudaMemset(a, 0, nx * (chunk_size + 2) * sizeof(real))" in start
    # the outputs are poisoned on the harness's non-blocking stream and cudaMemset runs on the legacy one,
    # which does not wait for it: the start value is written only once the poisoning is done
    assert start.index("cudaDeviceSynchronize()") < start.index("cudaMemset(a, 0")
    assert "launch_initialize_boundaries(a, a_new" in start
    assert 'extern "C" int cuco_baseline_start_outputs(cuco_ctx* ctx)' in baseline
    # the reference run of verify starts from the same value (poisoned outputs otherwise: NaN in the halo
    # rows the iteration reads but never writes, and every seed incorrect), on the reference set up once per
    # config (its buffers and the baseline's state kept between checks)
    problem = (out / "problem.cu").read_text()
    assert "cuco_baseline_setup(&r.ctx)" in problem.split("cuco_ctx* reference_for(")[1].split("\n}\n")[0]
    verify = problem.split("int cuco_problem_verify(")[1]
    steps = (
        "reference_for(ctx",
        "cudaMemsetAsync(ref->outputs[i].ptr, 0xFF",
        "cuco_baseline_start_outputs(ref)",
        "cuco_baseline_run(ref)",
    )
    run_order = [verify.index(step) for step in steps]
    assert run_order == sorted(run_order)
    _validates_as_written(capsys, out, tmp_path / "home")


@COMPILES
def test_init_carries_the_helper_the_region_calls_and_takes_the_sweep_apart(capsys, monkeypatch, tmp_path):
    """The scheduler-launched ring all-reduce: its timed loop calls ringAllReduce (the collectives and the
    add kernel are in there) inside a message-size sweep. init carries the helper as written, gives the
    overlap bound and the comm-skipping check its forms without collectives / without kernels, turns the
    sweep into one size (a config param the hidden config scales, the rounded count following it in
    problem.cu), and cuco validate accepts the workload as written."""
    out = tmp_path / "ring"
    text = _inits(capsys, monkeypatch, "async_ring_allreduce_single", out)
    assert "size sweep around the repeated region" in text
    candidate, baseline = (out / "candidate.cu").read_text(), (out / "baseline.cu").read_text()
    skip_comm = (out / "checks" / "skip_comm.cu").read_text()
    assert "TODO" not in text and "CUCO-TODO" not in candidate
    assert "static void ringAllReduce(" in candidate
    run = candidate.split("int run() {", 1)[1].split("return 0;", 1)[0]
    assert "ringAllReduce(d_send, d_recv, count" in run
    assert "// (communication outside the repeated region (a warm-up" in candidate  # the warm-up call
    compute = baseline.split("static void ringAllReduce_cuco_compute(", 1)[1].split("\n}", 1)[0]
    comm = baseline.split("static void ringAllReduce_cuco_comm(", 1)[1].split("\n}", 1)[0]
    assert "ncclSend" not in compute.replace("/* ncclSend: not in this variant */", "") and "add_vectors<<<" in compute
    assert "add_vectors<<<" not in comm and "ncclSend(send_ptr" in comm
    assert "ringAllReduce_cuco_compute(d_send" in skip_comm.split("int run() {", 1)[1].split("return 0;", 1)[0]
    assert "cudaFree(scratch_buff)" not in candidate.split("int teardown() {", 1)[1]
    workload = (out / "workload.yaml").read_text()
    assert "size: 16777216" in workload and "size: 12582912" in workload
    sizes = (out / "problem.cu").read_text().split("int sizes(", 1)[1].split("\n}", 1)[0]
    assert "if(count % nRanks != 0) count = (count + nRanks) - (count % nRanks);" in sizes
    _validates_as_written(capsys, out, tmp_path / "home")


@COMPILES
def test_init_reads_the_helper_that_holds_the_timed_section_as_main(capsys, monkeypatch, tmp_path):
    """CUCo's MoE seed: main() sets up MPI and NCCL and calls run_moe_alltoall(rank, nranks, comm), which
    holds everything else, the timed section between two events included. init reads the helper as main()
    (its parameters the harness's rank, rank count and communicator), the section is run(); the send counts
    {3072, 1024} scale with the 3072-token chunk they are padded to (the hidden config never sends more
    tokens than a chunk holds); the program's own buffers start zeroed (the padded tail a chunk never
    computes is the same in baseline and candidate); cuco validate accepts the workload as written."""
    out = tmp_path / "moe"
    text = _inits(capsys, monkeypatch, "cuco_moe_seed", out)
    assert "main() calls run_moe_alltoall(), which holds the timed section" in text
    candidate = (out / "candidate.cu").read_text()
    assert "TODO" not in text and "CUCO-TODO" not in candidate
    setup = candidate.split("int setup() {", 1)[1].split("return 0;", 1)[0]
    assert "rank = cuco_c->rank;" in setup and "nranks = cuco_c->nranks;" in setup and "comm = cuco_c->comm;" in setup
    assert '(long long)1024 * cuco_param_get(cuco_c, "max_chunk_tokens", 3072) / 3072' in setup
    assert "cudaMemset(d_expert_output, 0, padded_total_elems * sizeof(float))" in setup
    run = candidate.split("int run() {", 1)[1].split("return 0;\n  }", 1)[0]
    assert run.count("ncclAlltoAll(") == 2 and "tiledMatmul<<<" in run and "cudaEventRecord(" not in run
    assert "ncclAlltoAll(" not in (out / "checks" / "skip_comm.cu").read_text().split("int run() {", 1)[1]
    workload = (out / "workload.yaml").read_text()
    assert "max_chunk_tokens: 3072" in workload and "max_chunk_tokens: 2304" in workload
    _validates_as_written(capsys, out, tmp_path / "home")


def test_a_run_time_flag_is_an_alternative(capsys, monkeypatch):
    """Jacobi's norm is copied and reduced only `if (calculate_norm)`: --assume calculate_norm=false takes
    those operations out of the region's sequence; a malformed assumption is bad input."""
    files, flags, _ = PROGRAMS["nvidia_jacobi_nccl"]
    monkeypatch.chdir(CORPUS)
    rc, out, err = _run(capsys, "analyze", *files, *flags, "--assume", "calculate_norm=false", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert [o["name"] for o in _in_region(d)] == [
        "cudaMemsetAsync",
        "jacobi_kernel",
        "ncclGroupStart",
        "ncclRecv",
        "ncclSend",
        "ncclRecv",
        "ncclSend",
        "ncclGroupEnd",
    ]
    out_ops = {o["name"]: o["assumed_out"] for k in ("memory_ops", "mpi_calls") for o in d[k] if "assumed_out" in o}
    assert out_ops == {
        "cudaMemcpyAsync": "(calculate_norm) is false with calculate_norm=0",
        "MPI_Allreduce": "(calculate_norm) is false with calculate_norm=0",
    }
    rc, _, err = _run(capsys, "analyze", *files, "--assume", "calculate_norm")
    assert rc == 2 and err.startswith("cuco: --assume: calculate_norm: write NAME=VALUE")


def test_the_graph_variant_replays_its_capture(capsys, monkeypatch, tmp_path):
    """NVIDIA's Jacobi with each iteration captured as CUDA graphs (READING.md): the replay loop is the
    region; setup() captures the four graphs as the program does, on the harness's stream, with the events
    that fork and join its push stream; the skip_comm check replays the same capture without the halo
    exchange, so a workload that accepted it would be caught on GPUs."""
    name = "nvidia_jacobi_nccl_graphs"
    out = tmp_path / name
    text = _inits(capsys, monkeypatch, name, out, INIT_FLAGS[name])
    assert "TODO" not in text
    seed, skip = (out / "candidate.cu").read_text(), (out / "checks" / "skip_comm.cu").read_text()
    setup = seed.split("int setup() {", 1)[1].split("int run() {", 1)[0]
    assert "compute_stream = cuco_c->stream;" in setup
    assert "cudaStreamBeginCapture(compute_stream, cudaStreamCaptureModeGlobal)" in setup
    assert "cudaEventCreateWithFlags(&push_done, cudaEventDisableTiming)" in setup
    assert "cudaGraphInstantiateWithFlags(graph_calc_norm_exec+0" in setup
    assert "(a warm-up replay of the graphs: the harness warms up) CUDA_RT_CALL(cudaGraphLaunch(graph_exec[0]" in setup
    run = seed.split("int run() {", 1)[1].split("int teardown() {", 1)[0]
    assert "cudaGraphLaunch(graph_calc_norm_exec[iter%2], compute_stream)" in run
    assert "iter = 0;   // as before the region" in run  # every call replays the same graph
    skip_setup = skip.split("without its collectives", 1)[1].split("return 0;", 1)[0]
    assert skip_setup.count("not in this variant */;") == 6 and "ncclSend(" not in skip_setup
    skip_run = skip.split("int run() {", 1)[1].split("int teardown() {", 1)[0]
    assert "cudaGraphLaunch(graph_calc_norm_exec_cuco_compute[iter%2], compute_stream)" in skip_run
    _validates_as_written(capsys, out, tmp_path / "home")


@COMPILES
def test_jacobi_with_its_makefile_flags_validates(capsys, monkeypatch, tmp_path):
    """NVIDIA's Jacobi as a new user runs it, with its Makefile's flags: init names -DUSE_NVTX (the
    harness cannot take NVTX's loader) and undefines it, keeps -DHAVE_CUB for the kernels, and the
    workload validates, the seed first, in under 40 lines of output."""
    monkeypatch.chdir(CORPUS / "nvidia_jacobi_nccl")
    out = tmp_path / "jacobi"
    rc, text, err = _run(capsys, "init", "jacobi.cpp", "jacobi_kernels.cu", "--makefile", "Makefile", "-o", out)
    assert rc == 0, err
    (flag,) = [line for line in text.splitlines() if line.startswith("  flags ")]
    assert "jacobi.cpp:60: -DUSE_NVTX turns on NVTX profiler ranges" in flag and "-UUSE_NVTX" in flag
    cand = (out / "candidate.cu").read_text()
    assert "nvtx" not in cand.lower() and "cub::BlockReduce" in cand
    rc, text, _ = _run(capsys, "validate", out, "--home", tmp_path / "home")
    assert rc == 0, text
    assert text.index("compiled seed") < text.index("compiled rw_") and "workload OK" in text
    assert len(text.splitlines()) < 40


def test_jacobi_norm_allreduce_runs_as_the_harness_host_collective(capsys, monkeypatch, tmp_path):
    """NVIDIA's Jacobi all-reduces its norm on the host with MPI after a synchronize: the workload makes
    the same call, with the program's own buffers, count, datatype and op, through the harness's host
    communicator (no NCCL stand-in on the timed stream), and says so at its line."""
    out = tmp_path / "jacobi"
    text = _inits(capsys, monkeypatch, "nvidia_jacobi_nccl", out, INIT_FLAGS["nvidia_jacobi_nccl"])
    assert "jacobi.cpp:361: MPI_Allreduce inside the repeated region runs as the harness's cuco_host_allreduce" in text
    call = "cuco_host_allreduce(l2_norm_h, &l2_norm, 1, MPI_REAL_TYPE, MPI_SUM, cuco_c->host_comm)"
    for name in ("candidate.cu", "baseline.cu"):
        code = (out / name).read_text()
        run = code.split("int run() {")[1].split("\n  }")[0]
        assert f"MPI_CALL({call});" in run, name
        assert "ncclAllReduce" not in code and "ncclChar" not in code, name
        # MPI's names read as the harness's: the program's alias MPI_REAL_TYPE -> MPI_FLOAT -> CUCO_HOST_FLOAT
        assert "#define MPI_FLOAT CUCO_HOST_FLOAT" in code and "#define MPI_SUM CUCO_HOST_SUM" in code
    # the workload's notes say so: its head and the task the model reads
    workload = (out / "workload.yaml").read_text()
    assert "# host collective: nvidia_jacobi_nccl/jacobi.cpp:361: MPI_Allreduce -> cuco_host_allreduce" in workload
    assert "run as the harness's host collectives" in workload
    # the compute-only half of the frozen baseline leaves the host collective out, the comm-only half keeps it
    baseline = (out / "baseline.cu").read_text()
    assert call not in baseline.split("int run_compute() {")[1].split("\n  }")[0]
    assert call in baseline.split("int run_comm() {")[1].split("\n  }")[0]
