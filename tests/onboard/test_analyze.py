"""`cuco analyze` on the four test programs (MPI + allreduce, launcher + ring, all-to-all dispatch/combine,
standalone gemm + all-gather): the JSON matches the hand-reviewed golden files, and bad input exits 2
with file:line and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuco_tui.cli import main

PROGRAMS = Path(__file__).parent / "programs"
BAD = Path(__file__).parent / "bad"
NAMES = ["mpi_allreduce", "env_ring", "moe_alltoall", "gemm_allgather"]


def _analyze(capsys, *args) -> tuple[int, str, str]:
    rc = main(["analyze", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("name", NAMES)
def test_analysis_matches_golden(name, capsys, monkeypatch):
    monkeypatch.chdir(PROGRAMS)
    rc, out, err = _analyze(capsys, f"{name}.cu", "--json")
    assert rc == 0, err
    got = json.loads(out)
    got["preprocessing"].pop("missing_headers")  # mpi.h is installed on some machines, not others
    want = json.loads((PROGRAMS / f"{name}.json").read_text())
    assert got == want


def test_mpi_allreduce_facts(capsys, monkeypatch):
    """The facts a user reads first, spelled out (the golden file holds them all)."""
    monkeypatch.chdir(PROGRAMS)
    rc, out, _ = _analyze(capsys, "mpi_allreduce.cu", "--json")
    d = json.loads(out)
    assert d["communicators"][0]["id_exchange"] == "mpi_bcast"
    assert d["ranks"]["source"] == "mpi"
    assert d["region"]["timed"] and d["region"]["at"] == "mpi_allreduce.cu:60"
    roles = {b["name"]: b["role"] for b in d["buffers"]}
    assert roles == {"x": "input", "y": "intermediate", "out": "output"}
    chain = d["opportunities"][0]
    assert (chain["producer"], chain["collective"], chain["consumer"]) == (
        "scale_kernel",
        "ncclAllReduce",
        "residual_kernel",
    )
    assert chain["bytes_value"] == (1 << 22) * 4


def test_launcher_ring_and_alltoall_facts(capsys, monkeypatch):
    monkeypatch.chdir(PROGRAMS)
    _, out, _ = _analyze(capsys, "env_ring.cu", "--json")
    ring = json.loads(out)
    assert ring["ranks"]["source"] == "environment"
    assert ring["communicators"][0]["id_exchange"] == "file"
    calls = [c for c in ring["nccl_calls"] if c["name"] in ("ncclSend", "ncclRecv")]
    assert all(c["group"] for c in calls) and {c["peer"] for c in calls} == {"peer_next", "peer_prev"}
    _, out, _ = _analyze(capsys, "moe_alltoall.cu", "--json")
    moe = json.loads(out)
    assert [o["collective"] for o in moe["opportunities"]] == ["group(ncclRecv+ncclSend)"] * 2
    assert moe["opportunities"][0]["producer"] == "pack_kernel"
    assert moe["opportunities"][0]["consumer"] == "expert_kernel"
    counts = {c["count"] for c in moe["nccl_calls"] if c["name"] == "ncclSend"}
    assert counts == {"send_counts[p]", "recv_counts[p]"}  # uneven, per peer


def test_terminal_tree(capsys, monkeypatch):
    monkeypatch.chdir(PROGRAMS)
    rc, out, _ = _analyze(capsys, "moe_alltoall.cu")
    assert rc == 0
    assert "overlap opportunities" in out and "send + send_offsets[p]" in out
    assert "pack_kernel -> group(ncclRecv+ncclSend) -> expert_kernel" in out


@pytest.mark.parametrize(
    "file, where, words",
    [
        ("syntax_error.cu", "syntax_error.cu:7", "cuco's parser does not support"),
        ("no_nccl.cu", "no_nccl.cu", "no NCCL communication call"),
        ("dynamic_dispatch.cu", "dynamic_dispatch.cu:13", "dynamic dispatch"),
        ("macro_collective.cu", "macro_collective.cu:4", "hides ncclAllReduce"),
    ],
)
def test_bad_input_exits_2_naming_the_place(file, where, words, capsys, monkeypatch):
    monkeypatch.chdir(BAD)
    rc, out, err = _analyze(capsys, file)
    assert rc == 2
    assert err.startswith(f"cuco: {where}: ") and words in err
    assert "Traceback" not in err and out == ""


def test_missing_file_exits_2(capsys, tmp_path):
    rc, _, err = _analyze(capsys, str(tmp_path / "nope.cu"))
    assert rc == 2 and "no such file" in err


def test_kernels_in_another_file(tmp_path, capsys):
    """`cuco analyze main.cu kernels.cu`: main() in one file, the kernels it launches in another."""
    text = (PROGRAMS / "mpi_allreduce.cu").read_text()
    head, main_part = text.split("int main(", 1)
    (tmp_path / "kernels.cu").write_text(head)
    (tmp_path / "main.cu").write_text(
        "#include <mpi.h>\n#include <nccl.h>\n"
        + head.split("__global__")[0].split("#include <cuda_runtime.h>")[1]
        + "int main("
        + main_part
    )
    rc, out, err = _analyze(capsys, str(tmp_path / "main.cu"), str(tmp_path / "kernels.cu"), "--json")
    assert rc == 0, err
    d = json.loads(out)
    launches = {k["name"]: (k["reads"], k["writes"]) for k in d["kernel_launches"] if k["in_region"]}
    assert launches == {"scale_kernel": (["x"], ["y"]), "residual_kernel": (["y", "x"], ["out"])}
    assert d["unresolved"] == []
    rc, out, err = _analyze(capsys, str(tmp_path / "main.cu"), "--json")  # without the kernels' file
    assert rc == 0
    assert any("is not defined in the given files" in u["what"] for u in json.loads(out)["unresolved"])


def test_function_pointer_table_lists_its_targets_and_entry_chooses(tmp_path, capsys):
    """A collective chosen through a table: the refusal lists the targets; --entry NAME analyses the
    program as if it called that one, at the call through the table."""
    src = tmp_path / "table.cu"
    src.write_text("""#include <nccl.h>
#include <cuda_runtime.h>
typedef ncclResult_t (*coll_fn)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }
int main(int argc, char** argv) {
  ncclComm_t comm; ncclUniqueId id; ncclGetUniqueId(&id); ncclCommInitRank(&comm, 1, id, 0);
  coll_fn table[] = {ncclAllReduce, ncclReduceScatter};
  int which = argc > 1;
  float* x; cudaMalloc(&x, 1024 * sizeof(float));
  cudaStream_t s; cudaStreamCreate(&s);
  for (int i = 0; i < 10; ++i) {
    k<<<1, 1024, 0, s>>>(x);
    table[which](x, x, 1024, ncclFloat, ncclSum, comm, s);
  }
  return 0;
}
""")
    rc, _, err = _analyze(capsys, str(src))
    assert rc == 2 and f"{src}:7" in err and "the targets: ncclAllReduce, ncclReduceScatter" in err
    assert "--entry NAME" in err
    rc, out, err = _analyze(capsys, str(src), "--entry", "ncclReduceScatter", "--json")
    assert rc == 0, err
    call = next(c for c in json.loads(out)["nccl_calls"] if c["in_region"])
    assert (call["name"], call["through"], call["at"]) == ("ncclReduceScatter", "table[which]", f"{src}:13")
    assert call["send_buffer"] == "x"
    rc, _, err = _analyze(capsys, str(src), "--entry", "ncclBroadcast")
    assert rc == 2 and "--entry: ncclBroadcast: not a target" in err and "ncclAllReduce, ncclReduceScatter" in err


def test_region_flag_chooses_a_loop_or_names_the_loops(capsys, monkeypatch):
    monkeypatch.chdir(PROGRAMS)
    rc, out, err = _analyze(capsys, "gemm_allgather.cu", "--region", "gemm_allgather.cu:65", "--json")
    assert rc == 0, err
    region = json.loads(out)["region"]
    assert region["at"] == "gemm_allgather.cu:65"
    assert region["alternatives"] == [{"at": "gemm_allgather.cu:70", "what": "another loop around the collectives"}]
    rc, _, err = _analyze(capsys, "gemm_allgather.cu", "--region", "gemm_allgather.cu:40")
    assert rc == 2 and err.startswith("cuco: gemm_allgather.cu:40: --region: no loop around the collectives")
    assert "gemm_allgather.cu:65, gemm_allgather.cu:70" in err
