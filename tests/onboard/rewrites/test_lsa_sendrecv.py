"""lsa_sendrecv: a group of host sends and receives made one device-initiated kernel (NCCL's device API,
LSA stores into the peers' receive windows, matched at run time). Offered where the region's own statements
hold the group on one stream with receive buffers that can become windows; refused with the reason where
not; the rewritten program compiles with the real nvcc (the kernel in the region's file, or in the
program's .cu file when the region's file is host C++), and init searches it in the harness."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine import blocks
from engine.onboard.analyze import analyze_files
from engine.onboard.export_patch import patch_for
from engine.onboard.patch import unified_diff
from engine.onboard.rewrites import Offer, Refusal, check_all, facts_from_analysis, rewrite_program

from ..toolchain import compiles_with_nccl

HERE = Path(__file__).parent
HALO = HERE / "programs" / "halo.cu"
CORPUS = Path(__file__).resolve().parents[3] / ".." / "shared" / "corpus"
JACOBI = CORPUS / "nvidia_jacobi_nccl"
CLI = [sys.executable, "-m", "cuco_tui.cli"]


def verdict(*paths: Path) -> Offer | Refusal:
    return {v.rewrite: v for v in check_all(facts_from_analysis(analyze_files([str(p) for p in paths])))}[
        "lsa_sendrecv"
    ]


def halo_variant(tmp_path, old: str, new: str) -> Path:
    text = HALO.read_text()
    assert old in text
    out = tmp_path / "halo.cu"
    out.write_text(text.replace(old, new))
    return out


def test_offered_on_the_halo_exchange_with_its_ping_pong_partner():
    v = verdict(HALO)
    assert isinstance(v, Offer), v
    assert v.what == f"the group at {HALO}:69-74 (2 sends, 2 receives) as LSA stores into a_new, a"


@pytest.mark.parametrize(
    "old, new, reason",
    [
        (
            "    NCCLCHECK(ncclSend(a_new + iy_start * nx, nx, ncclFloat, top, comm, stream));\n",
            "    NCCLCHECK(ncclSend(a_new + iy_start * nx, nx, ncclFloat, top, comm, stream));\n"
            "    CUDACHECK(cudaMemsetAsync(norm_d, 0, sizeof(float), stream));\n",
            "the group holds a statement other than one ncclSend or ncclRecv",
        ),
        (
            "    NCCLCHECK(ncclGroupStart());\n",
            "    NCCLCHECK(ncclSend(a, nx, ncclFloat, top, comm, stream));\n    NCCLCHECK(ncclGroupStart());\n",
            "ncclSend is not in a group of the region's own statements",
        ),
        (
            "NCCLCHECK(ncclRecv(a_new + iy_end * nx, nx, ncclFloat, bottom, comm, stream));",
            "NCCLCHECK(ncclRecv(&a_new[iy_end * nx], nx, ncclFloat, bottom, comm, stream));",
            "the receive buffer &a_new[iy_end * nx] is not B or B + offset",
        ),
        (
            "CUDACHECK(cudaMalloc(&a_new, nx * (rows + 2) * sizeof(float)));",
            "CUDACHECK(cudaMallocManaged(&a_new, nx * (rows + 2) * sizeof(float)));",
            "the receive buffer a_new is not allocated by cudaMalloc(&a_new, ...) before the region",
        ),
        (
            # the ping-pong partner is a receive's buffer too (after the swap): it must become a window
            "CUDACHECK(cudaMalloc(&a, nx * (rows + 2) * sizeof(float)));",
            "CUDACHECK(cudaMallocManaged(&a, nx * (rows + 2) * sizeof(float)));",
            "the receive buffer a is not allocated by cudaMalloc(&a, ...) before the region",
        ),
        (
            "CUDACHECK(cudaMalloc(&a, nx * (rows + 2) * sizeof(float)));",
            "CUDACHECK(cudaMalloc(&a, nx * (rows + 3) * sizeof(float)));",
            "(a_new, a) have different sizes",
        ),
        (
            "NCCLCHECK(ncclSend(a_new + iy_start * nx, nx, ncclFloat, top, comm, stream));",
            "NCCLCHECK(ncclSend(a_new + iy_start * nx, nx, ncclFloat, top, comm, other));",
            "the group's calls are on several streams",
        ),
        (
            "    NCCLCHECK(ncclGroupEnd());\n",
            "    NCCLCHECK(ncclGroupEnd());\n    NCCLCHECK(ncclGroupStart());\n"
            "    NCCLCHECK(ncclRecv(a, nx, ncclFloat, top, comm, stream));\n"
            "    NCCLCHECK(ncclSend(a + nx, nx, ncclFloat, bottom, comm, stream));\n    NCCLCHECK(ncclGroupEnd());\n",
            "the group at",  # two groups on one stream: offered (the check below is for two streams)
        ),
        (
            "    NCCLCHECK(ncclGroupEnd());\n",
            "    NCCLCHECK(ncclGroupEnd());\n    NCCLCHECK(ncclGroupStart());\n"
            "    NCCLCHECK(ncclRecv(a, nx, ncclFloat, top, comm, stream));\n"
            "    NCCLCHECK(ncclSend(a + nx, nx, ncclFloat, bottom, comm, (cudaStream_t)0));\n    NCCLCHECK(ncclGroupEnd());\n",
            "the group's calls are on several streams",
        ),
        (
            "NCCLCHECK(ncclSend(a_new + iy_start * nx, nx, ncclFloat, top, comm, stream));",
            "NCCLCHECK(ncclSend(a_new + iy_start * nx, nx, ncclFloat, top, comms[0], stream));",
            "the communicator comms[0] is not a plain variable",
        ),
    ],
)
def test_refused_where_a_precondition_does_not_hold(tmp_path, old, new, reason):
    v = verdict(halo_variant(tmp_path, old, new))
    if reason == "the group at":
        assert isinstance(v, Offer) and v.what.count("the group at") == 2, v
        return
    assert isinstance(v, Refusal) and reason in v.reason, v


def test_refused_for_two_groups_on_different_streams(tmp_path):
    f = halo_variant(
        tmp_path,
        "    NCCLCHECK(ncclGroupEnd());\n",
        "    NCCLCHECK(ncclGroupEnd());\n    NCCLCHECK(ncclGroupStart());\n"
        "    NCCLCHECK(ncclRecv(a, nx, ncclFloat, top, comm, cuco_comm_stream));\n"
        "    NCCLCHECK(ncclSend(a + nx, nx, ncclFloat, bottom, comm, cuco_comm_stream));\n    NCCLCHECK(ncclGroupEnd());\n",
    )
    f.write_text(f.read_text().replace("  cudaStream_t stream;\n", "  cudaStream_t stream, cuco_comm_stream;\n"))
    v = verdict(f)
    # each on a stream a group may use (the region's, the one boundary_first makes), but their kernels could
    # run at once and would share the barriers and the tables
    assert isinstance(v, Refusal) and v.reason == "the groups are on different streams", v


def test_refused_for_collectives_and_for_sends_inside_a_helper():
    v = verdict(HERE.parent / "programs" / "gemm_allgather.cu")
    assert isinstance(v, Refusal) and "hold no group of ncclSend / ncclRecv" in v.reason
    # the MoE test program posts its sends and receives in a loop inside the group
    v = verdict(HERE.parent / "programs" / "moe_alltoall.cu")
    assert isinstance(v, Refusal) and "the group holds a statement other than one ncclSend or ncclRecv" in v.reason


def test_the_rewritten_halo_keeps_its_checks_and_makes_both_grids_windows():
    facts = facts_from_analysis(analyze_files([str(HALO)]))
    texts, notes = rewrite_program(facts, ["lsa_sendrecv"], {"comm_ctas": "8"})
    text = texts[str(HALO)].decode()
    for b in ("a", "a_new"):
        assert f"CUDACHECK(cudaMalloc(&{b}," not in text
        assert f"NCCLCHECK(ncclMemAlloc((void**)&{b}, nx * (rows + 2) * sizeof(float)));" in text
        assert f"NCCLCHECK(ncclMemFree({b}));" in text
        assert f"NCCLCHECK(ncclCommWindowDeregister(comm, cuco_p2p_win_{b}));" in text
    # every send and receive of the group, in the program's order, through its check; one launch at the group's end
    body = text[text.index("cuco_p2p_group cuco_g(") :]
    calls = [line.strip() for line in body.splitlines()[1:6]]
    assert calls == [
        "NCCLCHECK(cuco_g.recv(a_new, nx, ncclFloat, top));",
        "NCCLCHECK(cuco_g.send(a_new + (iy_end - 1) * nx, nx, ncclFloat, bottom));",
        "NCCLCHECK(cuco_g.recv(a_new + iy_end * nx, nx, ncclFloat, bottom));",
        "NCCLCHECK(cuco_g.send(a_new + iy_start * nx, nx, ncclFloat, top));",
        "NCCLCHECK(cuco_p2p_launch(cuco_p2p, cuco_g, stream));",
    ]
    assert "ncclGroupStart" not in text and "ncclSend(" not in text
    # set-up before the timer, teardown after the loop; the kernel and its host half in the file (CUDA source)
    assert text.index("NCCLCHECK(cuco_p2p_create(comm, 8, &cuco_p2p));") < text.index("double start = MPI_Wtime();")
    assert text.index("NCCLCHECK(cuco_p2p_destroy(comm, cuco_p2p));") > text.index("double stop = MPI_Wtime();")
    assert "__global__ void __launch_bounds__(512) cuco_lsa_sendrecv(" in text and "#include <nccl_device.h>" in text
    assert notes[0].startswith(f"lsa_sendrecv: the group of sends and receives at {HALO}:69 made device-initiated")


def _nccl_include() -> Path:
    import nvidia.nccl

    return Path(list(nvidia.nccl.__path__)[0]) / "include"


def _apply(diff: str, cwd: Path) -> None:
    r = subprocess.run(["patch", "-p1"], input=diff, text=True, cwd=cwd, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def _nvcc(cwd: Path, src: str, *flags: str) -> None:
    r = subprocess.run(
        ["nvcc", "-ccbin", "mpicxx", "-std=c++17", "-arch=sm_90", f"-I{_nccl_include()}", *flags, "-c", src],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{src}: {r.stderr[-2500:]}"


@compiles_with_nccl("the rewritten program is compiled where it is")
@pytest.mark.parametrize("names", [["lsa_sendrecv"], ["boundary_first", "lsa_sendrecv", "graph_replay"]])
def test_the_halo_patch_applies_and_compiles(tmp_path, names):
    if shutil.which("mpicxx") is None:
        pytest.skip("mpicxx is not on PATH: the program includes mpi.h")
    facts = facts_from_analysis(analyze_files([str(HALO)]))
    texts, notes = rewrite_program(facts, names, {"comm_ctas": "16"})
    assert [n.split(":")[0] for n in notes] == names
    shutil.copy(HALO, tmp_path / HALO.name)
    _apply(unified_diff(facts.texts, texts), tmp_path)
    _nvcc(tmp_path, HALO.name)


def _jacobi_or_skip() -> list[Path]:
    files = [JACOBI / "jacobi.cpp", JACOBI / "jacobi_kernels.cu"]
    if not files[0].is_file():
        pytest.skip(f"the corpus is not at {CORPUS}")
    return files


def test_offered_on_nvidias_jacobi_with_the_kernel_in_its_cuda_file():
    files = _jacobi_or_skip()
    facts = facts_from_analysis(analyze_files([str(f) for f in files]))
    texts, notes = rewrite_program(facts, ["lsa_sendrecv"], {"comm_ctas": "8"})
    host, device = texts[str(files[0])].decode(), texts[str(files[1])].decode()
    # jacobi.cpp is built by the host compiler: it declares what it calls, and the kernel goes to the .cu file
    assert "__global__" not in host and "nccl_device.h" not in host
    assert "ncclResult_t cuco_p2p_launch(cuco_p2p_state* st, const cuco_p2p_group& g, cudaStream_t stream);" in host
    assert "NCCL_CALL(cuco_g.recv(a_new, nx, NCCL_REAL_TYPE, top));" in host
    assert "NCCL_CALL(cuco_p2p_launch(cuco_p2p, cuco_g, compute_stream));" in host
    assert "#include <nccl_device.h>" in device and "cuco_lsa_sendrecv<<<st->ctas, 512, 0, stream>>>" in device
    assert notes[0].endswith(
        f"the kernel is in {files[1]}, which now includes NCCL's headers (its compiler needs their path)"
    )


@compiles_with_nccl("the rewritten program is compiled where it is")
def test_jacobi_patched_with_lsa_sendrecv_alone_compiles(tmp_path):
    if shutil.which("mpicxx") is None:
        pytest.skip("mpicxx is not on PATH: the program includes mpi.h")
    files = _jacobi_or_skip()
    facts = facts_from_analysis(analyze_files([str(f) for f in files]))
    texts, _ = rewrite_program(facts, ["lsa_sendrecv"])
    dest = tmp_path / "nccl"
    shutil.copytree(JACOBI, dest)
    dest.chmod(0o755)
    for f in dest.iterdir():
        f.chmod(0o644)
    _apply(unified_diff(facts.texts, texts), dest)
    # as its Makefile builds them: jacobi.cpp by the host compiler (mpicxx), the kernels by nvcc
    r = subprocess.run(
        ["mpicxx", "-std=c++17", "-DUSE_NVTX", f"-I{_nccl_include()}", "-I/usr/local/cuda/include", "-c", "jacobi.cpp"],
        cwd=dest,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2500:]
    _nvcc(dest, "jacobi_kernels.cu", "-DHAVE_CUB")


def test_init_searches_it_on_jacobi_and_export_patches_the_program(tmp_path):
    files = _jacobi_or_skip()
    out = tmp_path / "w"
    r = subprocess.run(
        [*CLI, "init", *(f.name for f in files), "--ranks", "2", "-o", str(out)],
        cwd=JACOBI,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "rewrite variant rewrites=lsa_sendrecv" in r.stdout + r.stderr
    spec = yaml.safe_load((out / "workload.yaml").read_text())
    seed = (out / "candidate.cu").read_text()
    assert "#include <nccl_device.h>" in seed.split("EVOLVE-BLOCK-START")[0]
    v = next(v for v in spec["variants"] if v["point"]["rewrites"] == "lsa_sendrecv")
    body = (out / v["file"]).read_text()
    # a and a_new are the harness's outputs, windows already: no allocation of their own; CTAs: the knob
    assert "cuco_c->outputs[1].win, (const char*)cuco_c->outputs[1].ptr, cuco_c->outputs[1].bytes" in body
    assert "ncclMemAlloc((void**)&a" not in body and "cuco_p2p_create(nccl_comm, kCommCtas, &cuco_p2p)" in body
    source = blocks.set_knob(blocks.replace_blocks(seed, blocks.block_bodies(body)), "comm_ctas", "32")
    diff, notes = patch_for(source, out, "candidate 2")
    assert "+        NCCL_CALL(cuco_p2p_create(nccl_comm, 32, &cuco_p2p));" in diff
    assert notes[0].startswith("lsa_sendrecv:")
    dest = tmp_path / "nccl"
    shutil.copytree(JACOBI, dest)
    dest.chmod(0o755)
    for f in dest.iterdir():
        f.chmod(0o644)
    _apply(diff, dest)
    assert "cuco_lsa_sendrecv<<<" in (dest / "jacobi_kernels.cu").read_text()
