"""End to end: `cuco run demo --headless --llm openai-compat:...` against a local OpenAI-compatible server.

The server answers every mutation with a SEARCH/REPLACE diff that moves the `chunk_rows` knob of the
parent it was shown to a value not tried yet; the children are built, verified and benchmarked by the
real CPU harness, recorded with their LLM cost, and the run stops at its USD budget.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm import FakeLLMServer, Reply

ROOT = Path(__file__).resolve().parents[2]
KNOB_RE = re.compile(r"static const int kChunkRows = (\d+);  // cuco:knob chunk_rows")
VALUES = [1, 2, 4, 8, 16, 64, 128, 256]

pytestmark = pytest.mark.skipif(
    not (ROOT / "engine" / "engine.py").is_file() or not (ROOT / "workloads" / "demo" / "workload.yaml").is_file(),
    reason="the engine (engine/run/engine.py) or the demo workload is missing",
)


def responder():
    counter = itertools.count()

    def answer(req):
        text = req.prompt_text
        if "review an evolutionary search" in text:
            return Reply('["Smaller chunks overlap better"]', input_tokens=500, output_tokens=20)
        parent = text.split("# Parent program", 1)[-1]
        m = KNOB_RE.search(parent)
        if m is None:
            return Reply("I cannot find the knob.")
        old = int(m.group(1))
        new = next(v for v in (VALUES[next(counter) % len(VALUES)] for _ in range(len(VALUES))) if v != old)
        line = f"static const int kChunkRows = {new};  // cuco:knob chunk_rows"
        if "Answer with the new text of every EVOLVE-BLOCK" in text:  # a full rewrite or a crossover
            source = parent.split("```\n", 1)[1]
            block = source[source.index("// EVOLVE-BLOCK-START") : source.index("// EVOLVE-BLOCK-END")]
            answer = f"Use {new}-row chunks.\n```cpp\n{block.replace(m.group(0), line)}// EVOLVE-BLOCK-END\n```\n"
        else:
            answer = f"Use {new}-row chunks.\n<<<<<<< SEARCH\n{m.group(0)}\n=======\n{line}\n>>>>>>> REPLACE\n"
        return Reply(answer, input_tokens=1000, output_tokens=2000)

    return answer


def cuco(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_headless_llm_run_stops_at_budget(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # local servers are free unless priced: price this one so the budget binds
    (home / "pricing.yaml").write_text("openai-compat:\n  coder: {input: 1.0, output: 10.0}\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    budget = 0.2
    with FakeLLMServer(responder=responder()) as srv:
        model = f"openai-compat:coder@{srv.url}/v1"
        run = cuco(
            "run",
            "demo",
            "--headless",
            "--llm",
            model,
            "--max-evals",
            "30",
            "--budget-usd",
            str(budget),
            "--islands",
            "1",
            "--home",
            str(home),
            "--name",
            "llm-e2e",
            env=env,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        mutate_requests = [r for r in srv.requests if r.path == "/v1/chat/completions"]
        assert mutate_requests
    rep = cuco("report", "llm-e2e", "--json", "--home", str(home), env=env, timeout=60)
    assert rep.returncode == 0, rep.stderr
    report = json.loads(rep.stdout)
    assert report["state"] in ("finished", "stopped")
    assert "budget" in (report.get("stop_reason") or "").lower()
    assert 0 < report["llm_cost_usd"] <= budget
    assert report["evaluated"] < 30

    db = sqlite3.connect(f"file:{home / 'cuco.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    llm_children = db.execute(
        "SELECT * FROM candidates WHERE run_id='llm-e2e' AND mutator=?", (f"llm:{model}",)
    ).fetchall()
    everything = [tuple(r) for r in db.execute("SELECT id, run_id, operator, mutator, status FROM candidates")]
    assert llm_children, f"no LLM-made candidate was recorded: {everything}"
    assert {c["operator"] for c in llm_children} <= {"llm-diff", "llm-full", "llm-cross"}
    assert any(c["status"] == "done" and c["speedup"] for c in llm_children)
    calls = db.execute("SELECT * FROM llm_calls WHERE run_id='llm-e2e'").fetchall()
    assert calls and all(c["prompt_hash"] and c["status"] == "ok" for c in calls)
    assert sum(c["cost_usd"] for c in calls) == pytest.approx(report["llm_cost_usd"], abs=1e-6)
    linked = {c["candidate_id"] for c in calls if c["purpose"] == "mutate"}
    assert linked & {c["id"] for c in llm_children}, "llm_calls rows are not linked to their candidates"


@pytest.mark.slow
def test_llm_settings_from_a_config_file_reach_the_mutator(tmp_path):
    """`meta_every: 2` in a run config file makes the meta-summarizer review the run every 2 evaluations
    (the default, 10, would not run once in 6), and a fork keeps the setting (it is stored with the run)."""
    home = tmp_path / "home"
    home.mkdir()
    conf = tmp_path / "search.yaml"
    conf.write_text("meta_every: 2\nislands: 1\nmax_evals: 6\nllm_max_attempts: 2\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    with FakeLLMServer(responder=responder()) as srv:
        model = f"openai-compat:coder@{srv.url}/v1"
        run = cuco(
            "run",
            "demo",
            "--headless",
            "--llm",
            model,
            "--config",
            str(conf),
            "--home",
            str(home),
            "--name",
            "meta-cfg",
            env=env,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        reviews = [r for r in srv.requests if "review an evolutionary search" in r.prompt_text]
    fork = cuco(
        "fork", "meta-cfg", "--name", "meta-fork", "--set", "llm_timeout_s=30", "--home", str(home), env=env, timeout=60
    )
    assert fork.returncode == 0, fork.stderr
    db = sqlite3.connect(f"file:{home / 'cuco.db'}?mode=ro", uri=True)
    purposes = [p for (p,) in db.execute("SELECT purpose FROM llm_calls WHERE run_id='meta-cfg' ORDER BY id")]
    configs = {run: json.loads(text) for run, text in db.execute("SELECT id, config_json FROM runs")}
    db.close()
    assert len(reviews) >= 2 and purposes.count("meta") == len(reviews), purposes
    assert configs["meta-cfg"]["meta_every"] == 2 and configs["meta-cfg"]["llm_max_attempts"] == 2
    assert configs["meta-fork"]["meta_every"] == 2 and configs["meta-fork"]["llm_timeout_s"] == 30.0
