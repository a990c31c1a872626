"""`cuco transform` tells the user, not the model, about a fault of the environment: with no NCCL for the
build (no `NCCL_HOME`, and a Python that cannot import the NCCL wheel) the first answer's build stops the verb with
the reason, and no judge or retry call is made. Its LLM timeout is settable."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from fake_llm import FakeLLMServer, Reply

from cuco_tui.verbs import transform as transform_verb
from engine.workload import load_workload


def fenced(source: str) -> str:
    return f"Here it is.\n```cuda\n{source}```\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    transform_verb.register(p.add_subparsers())
    return p


def test_nccl_missing_goes_to_the_user_not_the_model(llm_env, tmp_path, capsys):
    # a Python that cannot import the NCCL wheel: an `nvidia` package without `nccl` shadows it (outside /tmp,
    # which a sandboxed job sees private)
    shadow = Path(tempfile.mkdtemp(dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else Path.home()))
    try:
        (shadow / "nvidia").mkdir()
        (shadow / "nvidia" / "__init__.py").write_text("")
        llm_env.delenv("NCCL_HOME", raising=False)
        llm_env.setenv("PYTHONPATH", str(shadow))
        seed = load_workload("gemm_allgather").seed_source
        with FakeLLMServer(responder=lambda r: Reply(fenced(seed))) as srv:
            args = parser().parse_args(
                ["transform", "gemm_allgather", "--build-only", "--llm", f"openai-compat:coder@{srv.url}/v1"]
                + ["--llm-timeout-s", "400", "-o", str(tmp_path / "out.cu"), "--home", str(tmp_path / "home")]
            )
            assert args.func(args) == 1
            asked = [r.body["messages"][-1]["content"] for r in srv.requests]
    finally:
        shutil.rmtree(shadow)
    err = capsys.readouterr().err
    assert "the environment failed, not the answer" in err and "NCCL not found" in err, err
    assert len(asked) == 1, "the fault reached the model"
    assert not (tmp_path / "out.cu").exists()


def test_the_llm_timeout_must_be_positive(llm_env, tmp_path, capsys):
    args = parser().parse_args(
        ["transform", "demo", "--llm", "openai-compat:m@http://127.0.0.1:9/v1", "--llm-timeout-s", "0"]
        + ["--home", str(tmp_path)]
    )
    assert args.func(args) == 2
    assert "--llm-timeout-s" in capsys.readouterr().err
