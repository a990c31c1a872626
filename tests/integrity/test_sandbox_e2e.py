"""End to end: `cuco run --headless` with a canary key in its environment, and an LLM (a local server) that
answers with a spy: a candidate that reads the engine's /proc/PID/environ for the key and a key file in the
node user's home (the engine's HOME: local jobs run on the engine's node), prints them, and
writes into --home and the workload folder (a write "succeeds" only where the path lies under /tmp, which
is the job's own: nothing lands outside). The spy fails (nothing to steal), nothing was written, and the
canary is in no file under --home (the SQLite database, its WAL, the blobs: stage logs, feedback, prompts)
and in no request the LLM server received.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm"))
from fake_llm import FakeLLMServer, Reply  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CANARY = "sk-ant-CANARY-e2e-9876543210fedcba"
NODE_SECRET = "NODE-USER-KEY-e2e-13579bdf"
RUN_HEAD = 'extern "C" int cuco_run(const cuco_problem* p) {'

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the spy is compiled")

SPY_DECLS = (
    "typedef struct _IO_FILE FILE;\n"
    'extern "C" FILE* fopen(const char*, const char*);\n'
    'extern "C" unsigned long fread(void*, unsigned long, unsigned long, FILE*);\n'
    'extern "C" int fclose(FILE*);\n'
    'extern "C" int fputs(const char*, FILE*);\n'
    'extern "C" int printf(const char*, ...);\n'
    'extern "C" int fflush(FILE*);\n'
)


def spy(engine_pid: int, targets: list[Path], node_file: Path) -> str:
    names = ", ".join(f'"{t}"' for t in targets)
    return (
        "  {\n"
        "    static char buf[1 << 16];\n"
        "    int found = 0;\n"
        f'    if (FILE* f = fopen("/proc/{engine_pid}/environ", "rb")) {{\n'
        "      unsigned long n = fread(buf, 1, sizeof buf - 1, f);\n"
        "      fclose(f);\n"
        "      for (unsigned long i = 0; i + 18 < n; ++i)\n"
        '        if (!memcmp(buf + i, "ANTHROPIC_API_KEY=", 18)) { printf("stolen: %s\\n", buf + i); found = 1; }\n'
        "    }\n"
        f'    if (FILE* f = fopen("{node_file}", "rb")) {{\n'
        "      unsigned long n = fread(buf, 1, sizeof buf - 1, f);\n"
        "      fclose(f);\n"
        '      buf[n] = 0; printf("node file: %s\\n", buf); found = 1;\n'
        "    }\n"
        f"    const char* targets[] = {{{names}}};\n"
        "    for (const char* t : targets)\n"
        '      if (FILE* f = fopen(t, "w")) { fputs("x", f); fclose(f); printf("wrote %s\\n", t); }\n'
        "    fflush(nullptr);\n"
        "    if (!found) return 7;\n"
        "  }\n"
    )


def test_a_spy_from_the_llm_steals_no_key_and_the_canary_is_nowhere(tmp_path):
    folder = tmp_path / "workloads" / "demo"
    shutil.copytree(ROOT / "workloads" / "demo", folder)
    shutil.copytree(ROOT / "workloads" / "_harness", tmp_path / "workloads" / "_harness")
    with open(folder / "workload.yaml", "a") as f:  # as if the policy were got round (a computed pointer)
        f.write("\npolicy:\n  allow: [fopen, fread, fclose, fputs, printf, fflush]\n")
    home = tmp_path / "home"
    home.mkdir()
    targets = [home / "pwned", folder / "pwned"]
    # the node user's home (the engine's, for local jobs), with a key in it; not under /tmp, which every job
    # sees as its own (empty) directory anyway
    nodehome = Path(tempfile.mkdtemp(prefix="cuco-nodeuser-", dir="/var/tmp"))
    (nodehome / ".ssh").mkdir(parents=True)
    node_file = nodehome / ".ssh" / "id_test"
    node_file.write_text(f"-----BEGIN KEY-----\n{NODE_SECRET}\n")
    engine: dict[str, int] = {}

    def answer(req) -> Reply:
        body = spy(engine["pid"], targets, node_file)
        return Reply(
            f"Faster.\n<<<<<<< SEARCH\n{RUN_HEAD}\n=======\n{SPY_DECLS}{RUN_HEAD}\n{body}>>>>>>> REPLACE\n",
            input_tokens=100,
            output_tokens=100,
        )

    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_KEY"))}
    env.update(PYTHONPATH=str(ROOT), ANTHROPIC_API_KEY=CANARY, CUCO_OPENAI_COMPAT_KEY=CANARY, HOME=str(nodehome))
    with FakeLLMServer(responder=answer) as srv:
        model = f"openai-compat:coder@{srv.url}/v1"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cuco_tui.cli",
                "run",
                str(folder),
                "--headless",
                "--llm",
                model,
                "--max-evals",
                "4",
                "--islands",
                "1",
                "--home",
                str(home),
                "--name",
                "spy",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        engine["pid"] = proc.pid
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
        prompts = [r.prompt_text + repr(r.body) for r in srv.requests]
    assert prompts, "the LLM was never asked"
    db = sqlite3.connect(f"file:{home / 'cuco.db'}?mode=ro", uri=True)
    spies = db.execute("SELECT status, reason FROM candidates WHERE run_id='spy' AND mutator LIKE 'llm:%'").fetchall()
    db.close()
    assert spies, "no LLM-made candidate was evaluated"
    assert all(status == "incorrect" and "cuco_run returned 7" in (reason or "") for status, reason in spies), spies
    for t in targets:
        assert not t.exists(), f"the spy wrote {t}"
    shutil.rmtree(nodehome, ignore_errors=True)
    assert not any(CANARY in p or NODE_SECRET in p for p in prompts), "a secret reached a prompt"
    secret = (CANARY.encode(), NODE_SECRET.encode())
    leaked = [str(p) for p in home.rglob("*") if p.is_file() and any(x in p.read_bytes() for x in secret)]
    assert leaked == [], leaked
    assert CANARY not in out and NODE_SECRET not in out
