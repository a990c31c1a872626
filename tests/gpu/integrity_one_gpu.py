"""On one GPU: the helper-thread and the entry-point candidates through `cuco run gemm_allgather --ranks 1`
(an LLM on 127.0.0.1, tests/llm/fake_llm.py, answers every request with one of them in turn), each of which
must end refused or incorrect with its reason; no node user's file (a key planted in the node user's home)
and no secret in the store or any prompt. Run by tests/gpu/integrity_one_gpu.sh; writes $OUT/integrity.json.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "llm"))
from fake_llm import FakeLLMServer, Reply  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/cuco-gpu-out"))
BAD = ROOT / "tests" / "gpu" / "bad_candidates"
SEED = ROOT / "workloads" / "gemm_allgather" / "candidate.cu"
SECRET = "NODE-USER-SECRET-5c1e7a9b3d"
KEY = "sk-CANARY-gpu-integrity-0123456789"
START, END = "// EVOLVE-BLOCK-START schedule\n", "// EVOLVE-BLOCK-END\n"
EXPECTED = {  # candidate -> (statuses, words its reason must hold)
    "host_thread": (("incorrect", "failed"), "thread(s) it started still running"),
    "entry_point": (("refused",), "cudaGetDriverEntryPointByVersion"),
}


def schedule(source: str) -> str:
    """The schedule block's body (between its markers)."""
    a = source.index(START) + len(START)
    return source[a : source.index(END, a)]


def main() -> int:
    home, nodehome = OUT / "home", OUT / "nodehome"
    (nodehome / ".ssh").mkdir(parents=True, exist_ok=True)
    (nodehome / ".ssh" / "id_test").write_text(f"-----BEGIN KEY-----\n{SECRET}\n")
    old = schedule(SEED.read_text())
    names = list(EXPECTED)
    bodies = {n: schedule((BAD / f"{n}.cu").read_text()) for n in names}
    turn = itertools.count()

    def answer(req) -> Reply:
        name = names[next(turn) % len(names)]
        text = f"{name}\n<<<<<<< SEARCH\n{old}=======\n{bodies[name]}>>>>>>> REPLACE\n"
        return Reply(text, input_tokens=100, output_tokens=100)

    env = {k: v for k, v in os.environ.items() if not k.endswith("_KEY")}
    env.update(HOME=str(nodehome), CUCO_OPENAI_COMPAT_KEY=KEY)
    with FakeLLMServer(responder=answer) as srv:
        cmd = [
            sys.executable, "-m", "cuco_tui.cli", "run", os.environ.get("WORKLOAD", "gemm_allgather"), "--headless", "--ranks", "1",
            "--llm", f"openai-compat:coder@{srv.url}/v1", "--max-evals", "4", "--islands", "1",
            "--concurrency", "2", "--max-minutes", "2", "--home", str(home), "--name", "integrity",
        ]  # fmt: skip
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)
        prompts = [r.prompt_text + repr(r.body) for r in srv.requests]
    (OUT / "run.log").write_text(run.stdout + run.stderr)
    db = sqlite3.connect(f"file:{home / 'cuco.db'}?mode=ro", uri=True)
    cands = db.execute(
        "SELECT id, number, mutator, status, reason FROM candidates WHERE run_id='integrity' ORDER BY number"
    ).fetchall()
    jobs = db.execute(
        "SELECT candidate_id, stage, status, duration_s FROM evaluations WHERE run_id='integrity' ORDER BY id"
    ).fetchall()
    db.close()
    report: dict = {"rc": run.returncode, "candidates": [], "jobs": [], "problems": []}
    for _cid, number, mutator, status, reason in cands:
        report["candidates"].append({"number": number, "mutator": mutator, "status": status, "reason": reason})
    for cid, stage, status, duration in jobs:
        report["jobs"].append({"candidate": cid, "stage": stage, "status": status, "duration_s": duration})
    llm = [c for c in report["candidates"] if c["mutator"].startswith("llm")]
    for name, (statuses, words) in EXPECTED.items():
        hits = [c for c in llm if words in (c["reason"] or "")]
        if not hits or any(c["status"] not in statuses for c in hits):
            report["problems"].append(f"{name}: no candidate {'/'.join(statuses)} with '{words}' in its reason")
    if any(c["status"] == "done" for c in llm):
        report["problems"].append("an LLM candidate was believed")
    secrets = (SECRET.encode(), KEY.encode())
    leaked = [str(p) for p in home.rglob("*") if p.is_file() and any(s in p.read_bytes() for s in secrets)]
    if leaked:
        report["problems"].append(f"a secret in the store: {leaked}")
    if any(SECRET in p or KEY in p for p in prompts):
        report["problems"].append("a secret in a prompt")
    if not prompts:
        report["problems"].append("the LLM was never asked")
    (OUT / "integrity.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
