"""A slow model never stalls the run: `cuco run demo --headless --max-minutes M` against a real HTTP server on
127.0.0.1 that takes 40 s to answer ends within M minutes plus one evaluation, and the calls it cut short are
recorded as cancelled with the tokens their prompts spent.

"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_llm import FakeLLMServer, Reply

ROOT = Path(__file__).resolve().parents[2]
ANSWER_S = 40.0
MAX_MINUTES = 1.0
ONE_EVALUATION_S = 15.0  # a demo build, verify and benchmark on a loaded CI machine, with room to spare


@pytest.mark.slow
def test_max_minutes_holds_while_the_model_takes_40_s(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "pricing.yaml").write_text("openai-compat:\n  slow: {input: 1.0, output: 10.0}\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    with FakeLLMServer(responder=lambda req: Reply("no edit", delay_s=ANSWER_S)) as srv:
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "cuco_tui.cli", "run", "demo", "--headless", "--islands", "1"]
            + ["--llm", f"openai-compat:slow@{srv.url}/v1", "--max-minutes", str(MAX_MINUTES)]
            + ["--home", str(home), "--name", "slow"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=ANSWER_S * 3,
        )
        took = time.monotonic() - started
        asked = len(srv.requests)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert took < MAX_MINUTES * 60 + ONE_EVALUATION_S + 10, f"the run took {took:.1f} s"  # +10: start and exit
    db = sqlite3.connect(f"file:{home / 'cuco.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    run_row = db.execute("SELECT state, stop_reason FROM runs WHERE id='slow'").fetchone()
    calls = db.execute("SELECT status, input_tokens, cost_usd, error FROM llm_calls WHERE run_id='slow'").fetchall()
    db.close()
    assert run_row["state"] == "finished" and "minutes" in run_row["stop_reason"], dict(run_row)
    assert asked >= 1 and len(calls) == asked, [dict(c) for c in calls]  # every request recorded
    cancelled = [c for c in calls if c["status"] == "cancelled"]
    assert cancelled and all(c["status"] in ("ok", "cancelled") for c in calls), [dict(c) for c in calls]
    assert all(c["input_tokens"] > 0 and c["cost_usd"] > 0 and "stopped" in c["error"] for c in cancelled)
