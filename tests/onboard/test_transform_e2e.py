"""End to end: `cuco init` on a test program, `cuco transform` on the result against the project's own
wire-protocol test LLM server (a real HTTP server, the official OpenAI SDK), then `cuco validate` on the
transformed candidate. Every answer is built and verified by the real CUDA harness, which needs one
NVIDIA GPU: without one the test is skipped with the reason printed (docs/bring-your-own-program.md says
where it has run)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cuco_tui.cli import main
from tests.onboard.helpers import FakeLLMServer, Reply, fenced, gpus

PROGRAMS = Path(__file__).parent / "programs"


if gpus() == 0:
    print("tests/onboard/test_transform_e2e.py: skipped: no NVIDIA GPU here (the harness verifies every answer on one)")

HOP = """    ncclGroupStart();
    ncclSend(act, elems, ncclHalf, peer_next, comm, s);
    ncclRecv(recv, elems, ncclHalf, peer_prev, comm, s);
    ncclGroupEnd();
"""
# On one rank the ring's hop sends to itself: a copy-engine copy is the same data movement.
COPY = (
    "    if (cudaMemcpyAsync(recv, act, elems * sizeof(__half), cudaMemcpyDeviceToDevice, s) != cudaSuccess) "
    "return 1;\n"
)


def init_ring(tmp_path, monkeypatch) -> tuple[Path, str, str]:
    """`cuco init` on the ring program: its folder, the seed, and a stage-B answer (the hop as a copy)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    work = tmp_path / "ring"
    assert main(["init", str(PROGRAMS / "env_ring.cu"), "--ranks", "1", "-o", str(work)]) == 0
    seed = (work / "candidate.cu").read_text()
    assert HOP in seed
    return work, seed, seed.replace(HOP, COPY).replace("backend=host_nccl", "backend=copy_engine")


def validate_transformed(tmp_path, work: Path, out: Path, home: Path) -> int:
    """The transformed candidate in a copy of the workload, through `cuco validate`."""
    fast = out.read_text()
    assert "ncclSend(" not in fast and "cudaMemcpyAsync(recv, act" in fast
    transformed = tmp_path / "ring-transformed"
    shutil.copytree(work, transformed)
    (transformed / "candidate.cu").write_text(fast)
    return main(["validate", str(transformed), "--home", str(home)])


@pytest.mark.gpu
@pytest.mark.skipif(gpus() == 0, reason="no NVIDIA GPU: every transform answer is verified by the CUDA harness")
def test_init_then_transform_then_validate(tmp_path, monkeypatch, capsys):
    work, seed, stage_b = init_ring(tmp_path, monkeypatch)
    script = [Reply(fenced(seed)), Reply(fenced(stage_b))]
    home = tmp_path / "home"
    out = tmp_path / "ring-fast.cu"
    with FakeLLMServer(script=script, responder=lambda r: Reply("No diagnosis.")) as srv:
        rc = main(
            [
                "transform",
                str(work),
                "--llm",
                f"openai-compat:coder@{srv.url}/v1",
                "-o",
                str(out),
                "--max-a",
                "1",
                "--max-b",
                "1",
                "--home",
                str(home),
            ]
        )
        err = capsys.readouterr().err
        assert rc == 0, err
        assert len(srv.requests) == 2  # stage A, stage B: both verified on the first answer
    assert validate_transformed(tmp_path, work, out, home) == 0
    text = capsys.readouterr().out
    assert "compiled seed" in text and "seed verified" in text
    print(text)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) to build each answer")
def test_init_then_transform_build_only_then_validate(tmp_path, monkeypatch, capsys):
    """Without a GPU: `cuco transform --build-only` takes the first answer that builds and passes the symbol
    policy, says the result is not verified, and `cuco validate` compiles the transformed workload. An
    answer that does not compile is sent back to the model with the compiler's error."""
    pytest.importorskip("nvidia.nccl", reason="needs the NCCL headers: pip install 'cuco[cuda]'")
    work, seed, stage_b = init_ring(tmp_path, monkeypatch)
    broken = stage_b.replace(COPY, COPY.replace("cudaMemcpyAsync", "cudaMemcpyAsyncc"))
    # stage A, stage B's first answer, the judge's diagnosis of its build failure, stage B's second answer
    script = [Reply(fenced(seed)), Reply(fenced(broken)), Reply("The call is misspelt."), Reply(fenced(stage_b))]
    home = tmp_path / "home"
    out = tmp_path / "ring-fast.cu"
    with FakeLLMServer(script=script) as srv:
        rc = main(
            [
                "transform",
                str(work),
                "--llm",
                f"openai-compat:coder@{srv.url}/v1",
                "-o",
                str(out),
                "--max-a",
                "1",
                "--max-b",
                "2",
                "--home",
                str(home),
                "--build-only",
            ]
        )
        captured = capsys.readouterr()
        assert rc == 0, captured.err
        retry = [r for r in srv.requests if "cudaMemcpyAsyncc" in str(r)]
        assert retry, "the failed build's error went back to the model"
    assert "NOT verified" in captured.out
    assert validate_transformed(tmp_path, work, out, home) == 0
    assert "compiled seed" in capsys.readouterr().out


@pytest.mark.skipif(gpus() > 0, reason="this machine has a GPU: the full test above runs instead")
def test_transform_of_an_init_made_workload_needs_its_gpus_first(tmp_path, monkeypatch, capsys):
    """Without the workload's GPU, cuco transform stops before any LLM call (no cost), as for a shipped one."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    work = tmp_path / "ring"
    assert main(["init", str(PROGRAMS / "env_ring.cu"), "--ranks", "1", "-o", str(work)]) == 0
    with FakeLLMServer(script=[]) as srv:
        rc = main(
            [
                "transform",
                str(work),
                "--llm",
                f"openai-compat:coder@{srv.url}/v1",
                "-o",
                str(tmp_path / "fast.cu"),
                "--home",
                str(tmp_path / "home"),
            ]
        )
        assert srv.requests == []
    err = capsys.readouterr().err
    assert rc == 1 and "needs 1 GPUs" in err and not (tmp_path / "fast.cu").exists()
