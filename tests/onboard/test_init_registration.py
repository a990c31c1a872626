"""NCCL registration in an init-made workload. The harness's inputs and outputs are NCCL windows, which are
registered buffers, and NCCL needs the buffers of one call all registered or none: an all-to-all from an
input window into the program's own cudaMalloc'd receive buffer hangs at two ranks (the registered side
waits for a peer address the other never publishes). init allocates such a buffer with ncclMemAlloc and
registers it where the harness's buffers are windows; a buffer it cannot allocate itself turns local
registration off for the workload."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from cuco_tui.cli import main
from engine.onboard.model import Op
from engine.onboard.registration import plan

from .corpus import CORPUS

PROGRAM = Path(__file__).parent / "programs" / "moe_padded_alltoall.cu"


def _init(capsys, out: Path, *files: str) -> str:
    rc = main(["init", *files, "--ranks", "2", "-o", str(out)])
    text = capsys.readouterr()
    assert rc == 0, text.err
    return text.out


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_buffers_sharing_a_call_with_a_window_are_registered_like_it(tmp_path, capsys):
    out = tmp_path / "moe"
    notes = _init(capsys, out, str(PROGRAM))
    assert "moe_padded_alltoall.cu:56: recv shares NCCL calls with the harness's buffers" in notes
    assert "moe_padded_alltoall.cu:59: expert_out shares NCCL calls with the harness's buffers" in notes
    for rel in ("candidate.cu", "baseline.cu", "checks/do_nothing.cu", "checks/skip_comm.cu"):
        code = (out / rel).read_text()
        setup = _between(code, "int setup() {", "\n  }")
        # the dispatch's receive buffer: registrable memory, registered where the tokens (input 0) are a window
        assert "ncclMemAlloc((void**)(&recv), total * sizeof(float));" in setup, rel
        assert (
            "if (cuco_c->inputs[0].win != nullptr && ncclCommRegister(cuco_c->comm, recv, total * sizeof(float), "
            "&cuco_reg_recv) != ncclSuccess)"
        ) in setup, rel
        # the combine's send buffer follows the combined output (output 0)
        assert "ncclMemAlloc((void**)(&expert_out), total * sizeof(float));" in setup, rel
        assert "cuco_c->outputs[0].win != nullptr && ncclCommRegister(cuco_c->comm, expert_out," in setup, rel
        # a buffer only kernels touch is left as the program allocates it
        assert "cudaMalloc(&mid, total * sizeof(float));" in setup and "cuco_reg_mid" not in code, rel
        teardown = _between(code, "int teardown() {", "\n  }")
        assert teardown.index("ncclCommDeregister(cuco_c->comm, cuco_reg_recv)") < teardown.index("ncclMemFree(recv)")
        assert "ncclMemFree(expert_out)" in teardown and "cudaFree(mid)" in teardown, rel
    # the harness's reference run uses plain copies (no window), so there the buffers stay unregistered too
    assert "r.ctx.inputs[i].win = nullptr;" in (out / "problem.cu").read_text()
    assert "NCCL_LOCAL_REGISTER" not in (out / "workload.yaml").read_text()
    # lsa_collective still applies: the receive buffer is ncclMemAlloc'd already, and becomes its window
    variant = (out / "variants" / "rw_lsa_collective.cu").read_text()
    assert "ncclCommWindowRegister(comm, recv, total * sizeof(float), &cuco_win_recv" in variant


def test_a_buffer_the_workload_cannot_allocate_turns_local_registration_off(tmp_path, capsys):
    """The ring all-reduce receives into a scratch buffer its helper allocates on every call, from the
    harness's output window: the workload cannot register it, so it runs with NCCL_LOCAL_REGISTER=0."""
    out = tmp_path / "ring"
    notes = _init(capsys, out, str(CORPUS / "async_ring_allreduce_single" / "ring_allreduce.cu"))
    assert "ring_allreduce.cu:64: scratch_buff shares NCCL calls with the harness's registered buffers" in notes
    launch_env = _between((out / "workload.yaml").read_text(), "\n  env:\n", "\ntimeouts:")
    assert "NCCL_LOCAL_REGISTER: '0'" in launch_env and "NCCL_NVLS_ENABLE: '0'" in launch_env


def _op(i: int, kind: str, reads: list[str], writes: list[str], group: str | None = None) -> Op:
    return Op(
        id=f"op{i}",
        kind=kind,
        name="ncclSend" if kind == "p2p" else "ncclAlltoAll",
        at=f"p.cu:{i}",
        node=None,
        stmt=None,
        in_region=True,
        reads=reads,
        writes=writes,
        detail={"group": group},
    )


def test_registration_follows_the_buffers_through_every_call_and_group():
    ops = [
        _op(1, "collective", ["win_in"], ["recv"]),  # input window -> recv
        _op(2, "kernel", ["recv"], ["mid"]),  # kernels tie nothing
        _op(3, "collective", ["recv"], ["relay"]),  # relay: tied through recv
        _op(4, "p2p", ["a"], [], group="g1"),
        _op(5, "p2p", [], ["b"], group="g1"),  # a group of their own
        _op(6, "p2p", ["c"], [], group="g2"),
        _op(7, "p2p", [], ["win_out"], group="g2"),
    ]
    regs, blocked = plan(
        ops,
        {"win_in": "cuco_c->inputs[0].win", "win_out": "cuco_c->outputs[0].win"},
        own={"recv", "mid", "relay", "a", "b"},
    )
    assert [(r.buffer, r.condition) for r in regs] == [
        ("recv", "cuco_c->inputs[0].win != nullptr"),
        ("relay", "cuco_c->inputs[0].win != nullptr"),
    ]
    # c pairs with the output window across the group but is not the workload's to allocate
    assert blocked == [
        "p.cu:6: c shares NCCL calls with the harness's registered buffers but is not allocated by a "
        "cudaMalloc the workload can make an ncclMemAlloc"
    ]


def _nccl_headers() -> bool:
    try:
        return importlib.util.find_spec("nvidia.nccl") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: the compile is not checked here")
@pytest.mark.skipif(not _nccl_headers(), reason="the NCCL 2.28.9 headers (nvidia-nccl-cu13) are not installed")
def test_the_registering_workload_compiles_and_validates(tmp_path, capsys, monkeypatch):
    out = tmp_path / "moe"
    _init(capsys, out, str(PROGRAM))
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", str(out), "--home", str(tmp_path / "home")])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "compiled seed" in text and "workload OK" in text
