"""lsa_collective: a host all-to-all / all-gather made device-initiated (NCCL's device API, LSA stores into
the peers' windows). Offered where the region's own statements hold the collective on the region's stream
with a receive buffer that can become a window; refused with the reason where not; the rewritten program
compiles with the real nvcc and NCCL's headers, and init searches it in the harness."""

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
PROGRAMS = HERE.parent / "programs"
GEMM = PROGRAMS / "gemm_allgather.cu"
CORPUS = Path(__file__).resolve().parents[3] / ".." / "shared" / "corpus"
CLI = [sys.executable, "-m", "cuco_tui.cli"]


def verdict(path: Path) -> Offer | Refusal:
    return {v.rewrite: v for v in check_all(facts_from_analysis(analyze_files([str(path)])))}["lsa_collective"]


def gemm_variant(tmp_path, old: str, new: str) -> Path:
    text = GEMM.read_text()
    assert old in text
    out = tmp_path / "gemm_allgather.cu"
    out.write_text(text.replace(old, new))
    return out


def test_offered_for_an_in_place_all_gather_and_the_moe_seeds_two_all_to_alls():
    v = verdict(GEMM)
    assert isinstance(v, Offer) and v.what == f"ncclAllGather at {GEMM}:72 as LSA stores into C"
    moe = CORPUS / "cuco_moe_seed" / "ds_v3_moe.cu"
    if not moe.is_file():
        pytest.skip(f"the corpus is not at {CORPUS}")
    v = verdict(moe)
    assert isinstance(v, Offer) and v.what.endswith(
        f"ds_v3_moe.cu:246, ncclAlltoAll at {moe}:289 as LSA stores into d_quant_recv, d_final_output"
    )


@pytest.mark.parametrize(
    "old, new, reason",
    [
        (
            "CHECK_CUDA(cudaMalloc(&C,",
            "CHECK_CUDA(cudaMallocManaged(&C,",
            "the receive buffer C is not allocated by cudaMalloc(&C, ...) before the region",
        ),
        (
            "    CHECK_NCCL(ncclAllGather(C + (size_t)rank * M * N, C, (size_t)M * N, ncclBfloat16, comm, stream));\n  }\n"
            "  CHECK_CUDA(cudaEventRecord(stop",
            "    CHECK_NCCL(ncclGroupStart());\n    CHECK_NCCL(ncclAllGather(C + (size_t)rank * M * N, C, (size_t)M * N, "
            "ncclBfloat16, comm, stream));\n    CHECK_NCCL(ncclGroupEnd());\n  }\n  CHECK_CUDA(cudaEventRecord(stop",
            "a grouped collective is not made device-initiated",
        ),
        (
            "(size_t)M * N, ncclBfloat16, comm, stream));\n  }\n  CHECK_CUDA(cudaEventRecord(stop",
            "(size_t)M * N, dtype, comm, stream));\n  }\n  CHECK_CUDA(cudaEventRecord(stop",
            "the datatype dtype is not a literal NCCL type",
        ),
    ],
)
def test_refused_where_a_precondition_does_not_hold(tmp_path, old, new, reason):
    f = gemm_variant(tmp_path, old, new)
    if "dtype" in new:
        f.write_text(
            f.read_text().replace(
                "  cudaEvent_t start, stop;", "  ncclDataType_t dtype = ncclBfloat16;\n  cudaEvent_t start, stop;"
            )
        )
    v = verdict(f)
    assert isinstance(v, Refusal) and reason in v.reason, v


def test_refused_for_send_and_receive_and_for_a_collective_inside_a_helper():
    v = verdict(HERE / "programs" / "halo.cu")
    assert isinstance(v, Refusal) and "hold no ncclAlltoAll or ncclAllGather" in v.reason
    ring = CORPUS / "async_ring_allreduce_single" / "ring_allreduce.cu"
    if ring.is_file():
        v = verdict(ring)
        assert isinstance(v, Refusal) and "one inside a called function is not rewritten" in v.reason


def test_the_rewritten_program_keeps_its_checks_and_makes_the_receive_buffer_a_window():
    facts = facts_from_analysis(analyze_files([str(GEMM)]))
    texts, notes = rewrite_program(facts, ["lsa_collective"], {"comm_ctas": "32"})
    text = texts[str(GEMM)].decode()
    assert "CHECK_NCCL(ncclMemAlloc((void**)&C, (size_t)nranks * M * N * sizeof(__nv_bfloat16)));" in text
    assert (
        "CHECK_NCCL(ncclCommWindowRegister(comm, C, (size_t)nranks * M * N * sizeof(__nv_bfloat16), &cuco_win_C, "
        "NCCL_WIN_COLL_SYMMETRIC));" in text
    )
    # the warm-up's host all-gather stays; the timed loop's is the kernel, gathering (flag 1) 2-byte elements
    assert text.count("ncclAllGather(") == 1
    assert (
        "cuco_lsa_push<<<32, 512, 0, stream>>>(C + (size_t)rank * M * N, cuco_win_C, (size_t)((size_t)M * N) * 2, "
        "1, cuco_dev_comm);" in text
    )
    assert (
        text.index("ncclDevCommCreate")
        < text.index("CHECK_CUDA(cudaEventRecord(start")
        < text.index("cuco_lsa_push<<<")
    )
    assert text.index("CHECK_CUDA(cudaEventSynchronize(stop));") < text.index("ncclCommWindowDeregister")
    assert "#include <nccl_device.h>" in text
    assert notes[0].startswith(
        f"lsa_collective: ncclAllGather ({GEMM}:72) into C made device-initiated: a kernel of 32 CTAs"
    )


@compiles_with_nccl("the rewritten program is compiled where it is")
def test_the_patch_applies_to_the_program_and_compiles(tmp_path):
    import nvidia.nccl

    if shutil.which("mpicxx") is None:
        pytest.skip("mpicxx is not on PATH: the program includes mpi.h")
    facts = facts_from_analysis(analyze_files([str(GEMM)]))
    texts, _ = rewrite_program(facts, ["lsa_collective"])
    shutil.copy(GEMM, tmp_path / GEMM.name)
    r = subprocess.run(
        ["patch", "-p1"],
        input=unified_diff(facts.texts, texts),
        text=True,
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    include = Path(list(nvidia.nccl.__path__)[0]) / "include"
    r = subprocess.run(
        ["nvcc", "-ccbin", "mpicxx", "-std=c++17", "-arch=sm_90", f"-I{include}", "-c", GEMM.name, "-o", "prog.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_init_searches_it_and_export_writes_the_searched_ctas_back(tmp_path):
    src = tmp_path / "program"
    src.mkdir()
    shutil.copy(GEMM, src / GEMM.name)
    out = tmp_path / "w"
    r = subprocess.run(
        [*CLI, "init", GEMM.name, "--ranks", "2", "-o", str(out)], cwd=src, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "rewrite variant rewrites=lsa_collective" in r.stdout + r.stderr
    spec = yaml.safe_load((out / "workload.yaml").read_text())
    assert "lsa_collective" in spec["design_space"]["dimensions"]["rewrites"]["values"]
    seed = (out / "candidate.cu").read_text()
    assert "#include <nccl_device.h>" in seed.split("EVOLVE-BLOCK-START")[0]  # outside the blocks
    v = next(v for v in spec["variants"] if v["point"]["rewrites"] == "lsa_collective")
    body = (out / v["file"]).read_text()
    # C is the harness's output, already a window: no allocation of its own; the CTAs are the comm_ctas knob
    assert "cuco_c->outputs[0].win" in body and "ncclMemAlloc" not in body and "<<<kCommCtas, 512" in body
    source = blocks.set_knob(blocks.replace_blocks(seed, blocks.block_bodies(body)), "comm_ctas", "64")
    diff, notes = patch_for(source, out, "candidate 3")
    assert "+    cuco_lsa_push<<<64, 512, 0, stream>>>" in diff and notes[0].startswith("lsa_collective:")
    r = subprocess.run(["patch", "-p1", "--dry-run"], input=diff, text=True, cwd=src, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
