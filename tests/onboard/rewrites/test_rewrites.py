"""The schedule rewrites on real programs: offered where the analysis shows their preconditions, refused
with the reason where not, and the rewritten program, as a patch against the user's files, compiles with
the real nvcc and NCCL's headers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.onboard.analyze import analyze_files
from engine.onboard.patch import unified_diff
from engine.onboard.rewrites import (
    REGISTRY,
    Offer,
    Refusal,
    RewriteError,
    check_all,
    facts_from_analysis,
    rewrite_program,
)
from remote.errors import InputError

HERE = Path(__file__).parent
HALO = HERE / "programs" / "halo.cu"
PROGRAMS = HERE.parent / "programs"
CORPUS = Path(__file__).resolve().parents[3] / ".." / "shared" / "corpus"


def verdicts(*files) -> dict[str, Offer | Refusal]:
    return {v.rewrite: v for v in check_all(facts_from_analysis(analyze_files([str(f) for f in files])))}


def variant(tmp_path, old: str, new: str) -> Path:
    text = HALO.read_text()
    assert old in text
    out = tmp_path / "halo.cu"
    out.write_text(text.replace(old, new))
    return out


def test_every_rewrite_but_comm_stream_and_lsa_collective_is_offered_on_the_halo_exchange():
    v = verdicts(HALO)
    assert all(
        isinstance(v[r.name], Offer)
        for r in REGISTRY
        if r.name not in ("comm_stream", "lsa_collective", "keep_scratch")
    ), v
    assert isinstance(v["lsa_collective"], Refusal)  # sends and receives, no all-to-all or all-gather
    assert isinstance(v["comm_stream"], Refusal)  # the host synchronises right after the exchange
    assert "halo.cu:75) synchronises the host; nothing would overlap" in v["comm_stream"].reason
    assert "launch_relax" in v["boundary_first"].what and "iy_start" in v["boundary_first"].what
    assert v["graph_replay"].what.endswith("a, a_new")  # one graph per parity of the ping-pong


def test_boundary_first_refused_for_a_direct_launch_and_without_a_group():
    ring = verdicts(PROGRAMS / "env_ring.cu")["boundary_first"]
    assert isinstance(ring, Refusal) and "direct <<<>>> launch" in ring.reason
    allreduce = verdicts(PROGRAMS / "mpi_allreduce.cu")["boundary_first"]
    assert isinstance(allreduce, Refusal) and "ncclGroupStart" in allreduce.reason


def test_boundary_first_refused_when_a_receive_lands_inside_the_interior(tmp_path):
    f = variant(tmp_path, "ncclRecv(a_new + iy_end * nx,", "ncclRecv(a_new + (iy_end - 2) * nx,")
    v = verdicts(f)["boundary_first"]
    assert isinstance(v, Refusal) and "a receive writes a_new + (iy_end - 2) * nx" in v.reason


def test_boundary_first_refused_in_place(tmp_path):
    f = variant(tmp_path, "launch_relax(a_new, a, norm_d", "launch_relax(a_new, a_new, norm_d")
    v = verdicts(f)["boundary_first"]
    assert isinstance(v, Refusal) and "in place" in v.reason


def test_graph_replay_refused_when_the_captured_work_reads_the_counter(tmp_path):
    f = variant(
        tmp_path,
        "launch_relax(a_new, a, norm_d, iy_start, iy_end, nx, stream)",
        "launch_relax(a_new, a, norm_d, iy_start, iy_end, nx + iter % 2, stream)",
    )
    v = verdicts(f)["graph_replay"]
    assert isinstance(v, Refusal) and "reads iter, which changes every iteration" in v.reason


def test_comm_config_refused_where_a_config_is_given(tmp_path):
    f = variant(
        tmp_path,
        "NCCLCHECK(ncclCommInitRank(&comm, size, id, rank));",
        "ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;\n  NCCLCHECK(ncclCommInitRankConfig(&comm, size, id, rank, &cfg));",
    )
    v = verdicts(f)["comm_config"]
    assert isinstance(v, Refusal) and "ncclCommInitRankConfig" in v.reason


def test_nccl_register_refused_for_a_buffer_allocated_before_the_communicator(tmp_path):
    text = HALO.read_text()
    alloc = "  float* a;\n  float* a_new;\n  CUDACHECK(cudaMalloc(&a, nx * (rows + 2) * sizeof(float)));\n"
    assert alloc in text
    text = text.replace(alloc, "  float* a_new;\n").replace(
        "  ncclComm_t comm;\n",
        "  const int nx = 4096;\n  const int rows = 1024;\n"
        "  float* a;\n  CUDACHECK(cudaMalloc(&a, nx * (rows + 2) * sizeof(float)));\n  ncclComm_t comm;\n",
        1,
    )
    text = text.replace(
        "  const int nx = 4096;\n  const int rows = 1024;\n  const int iter_max", "  const int iter_max"
    )
    f = tmp_path / "halo.cu"
    f.write_text(text)
    v = verdicts(f)["nccl_register"]
    assert isinstance(v, Refusal) and "a is allocated before the communicator exists" in v.reason


RING_STEP = "    ncclGroupEnd();\n"
RING_BESIDE = "    stage_kernel<<<(elems + 511) / 512, 512, 0, s>>>(in, next, elems, 2.0f);\n"


def test_comm_stream_offered_only_with_device_work_between_the_exchange_and_its_use(tmp_path):
    ring = verdicts(PROGRAMS / "env_ring.cu")["comm_stream"]
    assert isinstance(ring, Refusal) and "env_ring.cu:71) uses recv; nothing would overlap" in ring.reason
    text = (PROGRAMS / "env_ring.cu").read_text()
    assert text.count(RING_STEP) == 1
    f = tmp_path / "env_ring.cu"
    f.write_text(text.replace(RING_STEP, RING_STEP + RING_BESIDE))
    v = verdicts(f)["comm_stream"]
    assert isinstance(v, Offer) and v.what.endswith("beside the device work at line(s) 71")


def test_comm_stream_joins_before_the_first_use_and_compiles(tmp_path):
    nvcc, nccl_include = _toolchain()
    (tmp_path / "src").mkdir()
    f = tmp_path / "src" / "env_ring.cu"
    f.write_text((PROGRAMS / "env_ring.cu").read_text().replace(RING_STEP, RING_STEP + RING_BESIDE))
    dest, notes = _patched_copy([f], ["comm_stream", "graph_replay"], {}, tmp_path / "patched")
    assert notes[0].startswith("comm_stream: ncclRecv, ncclSend (")
    text = (dest / "env_ring.cu").read_text()
    body = text[text.index("cudaEventRecord(cuco_ready, s)") :]
    order = [
        body.index(x)
        for x in (
            "ncclSend(act, elems, ncclHalf, peer_next, comm, cuco_comm_stream)",
            "cudaEventRecord(cuco_comm_done, cuco_comm_stream)",
            "stage_kernel<<<(elems + 511) / 512, 512, 0, s>>>(in, next",
            "cudaStreamWaitEvent(s, cuco_comm_done, 0)",
            "consume_kernel<<<",
        )
    ]
    assert order == sorted(order)
    r = subprocess.run(
        [nvcc, "-std=c++17", f"-I{nccl_include}", "-c", "env_ring.cu", "-o", "env_ring.o"],
        cwd=dest,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_refused_rewrite_is_not_applied(tmp_path):
    facts = facts_from_analysis(analyze_files([str(PROGRAMS / "env_ring.cu")]))
    with pytest.raises(RewriteError, match="boundary_first does not apply: no launch wrapper"):
        rewrite_program(facts, ["boundary_first"])


def _toolchain() -> tuple[str, str]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH: the rewritten programs are compiled where it is")
    try:
        import nvidia.nccl as nccl
    except ImportError:
        pytest.skip("NCCL's headers (pip install nvidia-nccl-cu13) are not installed")
    mpicxx = shutil.which("mpicxx")
    if mpicxx is None:
        pytest.skip("mpicxx (OpenMPI's headers) is not installed: the programs include mpi.h")
    return nvcc, os.path.join(list(nccl.__path__)[0], "include")


def _patched_copy(files: list[Path], names: list[str], knobs: dict, dest: Path) -> tuple[Path, list[str]]:
    facts = facts_from_analysis(analyze_files([str(f) for f in files]))
    texts, notes = rewrite_program(facts, names, knobs)
    diff = unified_diff(facts.texts, texts)
    src = files[0].parent
    shutil.copytree(src, dest)
    patch = dest / "cuco.patch"
    patch.write_text(diff)
    subprocess.run(["patch", "-p1", "-i", "cuco.patch"], cwd=dest, check=True, capture_output=True, timeout=30)
    return dest, notes


@pytest.mark.parametrize(
    "names",
    [
        ["boundary_first"],
        ["nccl_register"],
        ["graph_replay"],
        ["comm_config"],
        ["boundary_first", "nccl_register", "comm_config", "graph_replay"],
    ],
)
def test_the_patch_applies_to_the_halo_program_and_compiles(tmp_path, names):
    nvcc, nccl_include = _toolchain()
    folder = tmp_path / "src"
    shutil.copytree(HALO.parent, folder)
    dest, notes = _patched_copy(
        [folder / "halo.cu"], names, {"comm_ctas": "8", "nccl_proto": "LL128"}, tmp_path / "patched"
    )
    assert [n.split(":")[0] for n in notes] == [r.name for r in REGISTRY if r.name in names]
    text = (dest / "halo.cu").read_text()
    assert text.count("cuco rewrite") >= len(names)
    r = subprocess.run(
        [nvcc, "-ccbin", "mpicxx", "-std=c++17", f"-I{nccl_include}", "-c", "halo.cu", "-o", "halo.o"],
        cwd=dest,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def _jacobi_facts_or_skip(folder: Path):
    files = [folder / "jacobi.cpp", folder / "jacobi_kernels.cu"]
    if not files[0].is_file():
        pytest.skip(f"the corpus is not at {folder}")
    try:
        return files, verdicts(*files)
    except InputError as exc:
        pytest.skip(f"the analysis cannot read NVIDIA's Jacobi yet: {exc}")


def test_jacobi_patched_with_every_offered_rewrite_builds_with_its_own_makefile(tmp_path):
    files, v = _jacobi_facts_or_skip(CORPUS / "nvidia_jacobi_nccl")
    offered = [r.name for r in REGISTRY if isinstance(v[r.name], Offer)]
    assert offered == ["boundary_first", "nccl_register", "comm_config", "lsa_sendrecv", "graph_replay"], v
    nvcc, nccl_include = _toolchain()
    dest, _ = _patched_copy(files, offered, {"comm_ctas": "8"}, tmp_path / "nccl")
    make = (dest / "Makefile").read_text().replace("-std=c++14", "-std=c++17")  # CUDA 13's CUB
    (dest / "Makefile").write_text(make)
    home = tmp_path / "ncclhome"
    (home / "lib").mkdir(parents=True)
    (home / "include").symlink_to(nccl_include)
    (home / "lib" / "libnccl.so").symlink_to(Path(nccl_include).parent / "lib" / "libnccl.so.2")
    cuda = next(
        (
            c
            for c in [
                os.environ.get("CUDA_HOME", ""),
                str(Path(os.path.realpath(nvcc)).parent.parent),
                *sorted(map(str, Path("/usr/local").glob("cuda*"))),
            ]
            if c and (Path(c) / "include" / "cuda_runtime.h").is_file()
        ),
        None,
    )
    if cuda is None:
        pytest.skip("no CUDA toolkit with include/cuda_runtime.h found for the Makefile's CUDA_HOME")
    # lsa_sendrecv's kernel is in jacobi_kernels.cu, which now includes NCCL's headers: the Makefile gives their
    # path to mpicxx only, so nvcc finds them as where NCCL_HOME is the default /usr, through CPATH
    env = {**os.environ, "CPATH": os.pathsep.join(filter(None, [nccl_include, os.environ.get("CPATH", "")]))}
    r = subprocess.run(
        ["make", "BUILD_SM_ARCH=90", f"NCCL_HOME={home}", f"CUDA_HOME={cuda}", "jacobi"],
        cwd=dest,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
