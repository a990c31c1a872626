"""`cuco init --llm MODEL`: the model completes the CUCO-TODO parts, through the project's LLM service and
a real HTTP server speaking the OpenAI wire protocol (tests/llm/fake_llm.py); every answer is compiled
(real nvcc) before it is taken, and the frozen baseline gets the same setup()."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cuco_tui.cli import main
from engine.evaluation.evaluation import build_job
from engine.llm.budget import Budget
from engine.llm.models import parse_model
from engine.llm.pricing import Pricing
from engine.llm.retry import RetryPolicy
from engine.llm.service import LLMService
from engine.onboard.complete import chat_with, complete_todos, setup_body
from engine.workload import load_workload
from remote.local import LocalExecutor
from tests.onboard.helpers import FakeLLMServer, Reply, fenced, gpus

TODO_PROGRAM = Path(__file__).parent / "todo" / "loopvar_env.cu"


def completed(source: str) -> str:
    out = []
    for line in source.splitlines(keepends=True):
        if "CUCO-TODO" in line and "stride = {};" in line:
            line = "    stride = 1;\n"
        elif "CUCO-TODO" in line:
            line = line.split("//")[0].rstrip() + "\n"
        out.append(line)
    return "".join(out)


@pytest.mark.skipif(gpus() > 0, reason="this machine has a GPU: the completion would run")
def test_init_llm_without_a_gpu_stops_before_any_llm_call(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    out = tmp_path / "w"
    with FakeLLMServer(script=[]) as srv:
        rc = main(
            [
                "init",
                str(TODO_PROGRAM),
                "-o",
                str(out),
                "--ranks",
                "1",
                "--llm",
                f"openai-compat:coder@{srv.url}/v1",
                "--home",
                str(tmp_path / "home"),
            ]
        )
        assert srv.requests == []
    err = capsys.readouterr().err
    assert rc == 1 and "--llm" in err and "GPU" in err and "its TODOs stay" in err
    assert "CUCO-TODO" in (out / "candidate.cu").read_text()  # the workload is written, TODOs kept


def test_init_llm_bad_model_is_bad_input_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "w"
    rc = main(["init", str(TODO_PROGRAM), "-o", str(out), "--llm", "nope:x"])
    assert rc == 2 and "--llm" in capsys.readouterr().err
    assert not out.exists()


@dataclass
class Compiled:
    status: str
    reason: str = ""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: answers cannot be compiled here")
@pytest.mark.skipif(importlib.util.find_spec("nvidia") is None, reason="the NCCL headers are not installed")
async def test_completion_is_compiled_and_copied_into_the_baseline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    root = tmp_path / "w"
    assert main(["init", str(TODO_PROGRAM), "-o", str(root), "--ranks", "1"]) == 0
    todos = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("TODO")]
    seed = (root / "candidate.cu").read_text()
    w = load_workload(str(root))
    executor = LocalExecutor(extra_env={"CUCO_PYTHON": sys.executable})
    compiled = []

    baselines = []

    async def evaluate(source: str, baseline: str) -> Compiled:  # the build, for real; the verify needs a GPU
        baselines.append(baseline)
        res = await executor.run(build_job(w, source, f"complete-{len(compiled)}"))
        compiled.append(res.ok)
        return Compiled("done" if res.ok else "failed", "" if res.ok else res.log[-500:])

    script = [Reply(fenced(seed)), Reply(fenced(completed(seed)))]  # first still has the TODOs
    with FakeLLMServer(script=script) as srv:
        model = f"openai-compat:coder@{srv.url}/v1"
        svc = LLMService([parse_model(model)], Pricing.load(tmp_path), Budget(None), RetryPolicy(timeout_s=10))
        try:
            done = await complete_todos(root, todos, chat_with(svc, model), evaluate)
        finally:
            await svc.close()
            await executor.close()
        assert len(srv.requests) == 2
        assert "still had CUCO-TODO" in srv.requests[1].prompt_text
    assert done.ok and done.attempts == 2 and compiled == [True]
    cand = (root / "candidate.cu").read_text()
    assert "CUCO-TODO" not in cand and "stride = 1;" in cand
    base = (root / "baseline.cu").read_text()
    assert setup_body(base) == setup_body(cand)
    # the answer was judged against the baseline written, and that one keeps no TODO the answer settled
    assert (
        baselines == [base]
        and "CUCO-TODO" not in base
        and "const int t = 0 + (int)((long long)cuco_c->iteration" in base
    )


@pytest.mark.gpu
@pytest.mark.skipif(gpus() == 0, reason="no NVIDIA GPU: cuco init --llm verifies every completion on one")
def test_init_llm_end_to_end_on_a_gpu(tmp_path, monkeypatch, capsys):
    """The command as a user runs it: the first answer still has a TODO and goes back, the second is built,
    verified on the GPU and taken; the workload then validates with no TODO left."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    plain = tmp_path / "plain"
    assert main(["init", str(TODO_PROGRAM), "-o", str(plain), "--ranks", "1"]) == 0
    seed = (plain / "candidate.cu").read_text()
    capsys.readouterr()
    out = tmp_path / "w"
    script = [Reply(fenced(seed)), Reply(fenced(completed(seed)))]
    with FakeLLMServer(script=script, responder=lambda r: Reply("No diagnosis.")) as srv:
        rc = main(
            [
                "init",
                str(TODO_PROGRAM),
                "-o",
                str(out),
                "--ranks",
                "1",
                "--llm",
                f"openai-compat:coder@{srv.url}/v1",
                "--home",
                str(tmp_path / "home"),
            ]
        )
        err = capsys.readouterr().err
        assert rc == 0, err
        assert len(srv.requests) >= 2
    cand = (out / "candidate.cu").read_text()
    assert "CUCO-TODO" not in cand and "stride = 1;" in cand
    assert main(["validate", str(out), "--home", str(tmp_path / "home")]) == 0
    text = capsys.readouterr().out
    assert "seed verified" in text and "TODO" not in text, text
    print(text)
