"""The parent's timeline reaches the model: `cuco run demo --headless --llm openai-compat:...` against a local
OpenAI-compatible server; the captured mutation requests carry the parent's per-rank summary (exposed
communication, idle gaps, what dominates), the meta-summarizer's request the best program's, and no request
names a hidden problem size."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm import FakeLLMServer
from test_llm_e2e import responder

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ("odd", "sliver")  # the demo's hidden configs (workloads/demo/workload.yaml)


@pytest.mark.slow
def test_prompts_carry_the_parents_timeline_and_no_hidden_size(tmp_path):
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    with FakeLLMServer(responder=responder()) as srv:
        model = f"openai-compat:coder@{srv.url}/v1"
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "cuco_tui.cli",
                "run",
                "demo",
                "--headless",
                "--llm",
                model,
                "--max-evals",
                "5",
                "--islands",
                "1",
                "--set",
                "meta_every=2",
                "--home",
                str(home),
                "--name",
                "tl-llm",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        bodies = [json.dumps(r.body) for r in srv.requests if r.path == "/v1/chat/completions"]
        texts = [r.prompt_text for r in srv.requests if r.path == "/v1/chat/completions"]
    mutations = [t for t in texts if "# Parent program" in t]
    reviews = [t for t in texts if "review an evolutionary search" in t]
    assert mutations and reviews
    with_timeline = [t for t in mutations if "where its time went" in t]
    assert with_timeline, mutations[0][:3000]
    parent_part = with_timeline[0].split("# Parent program", 1)[1].split("```", 1)[0]
    for config in ("tall", "square"):
        assert f"- {config}: overlap fraction" in parent_part
    assert re.search(r"rank 0: exposed communication \d+\.\d+ ms \(\d+% of its", parent_part)
    assert "largest idle gap" in parent_part and "dominant:" in parent_part
    assert any("Where the best program's time goes" in t and "exposed communication" in t for t in reviews)
    for body in bodies:
        for name in HIDDEN:
            assert not re.search(rf"(?<![A-Za-z0-9_]){name}(?![A-Za-z0-9_])", body), (name, body[:2000])
