"""Failure memory and the repair operator end to end: the real engine, the demo's real CPU harness (g++
builds every child), and a test server speaking each official SDK's protocol.

The scripted model first answers with a child that uses a name it never declares: the real compiler
rejects it. The next prompt must be a repair of that child carrying the compiler's error and the line it
points at; the model's fix must become a correct child made by `llm-repair`, whose parent is the failed
child. Every later mutation prompt must still show the failure, and the audit log must say which
candidates each prompt showed.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from fake_llm import FakeLLMServer, Reply

from engine.config import RunConfig
from engine.run.engine import Engine
from engine.store.store import ReadStore
from engine.views.report import build_report
from engine.workload import load_workload

CALL = "gemm_rows(p, 0, p->M, p->scratch, N);"
BROKEN = "gemm_rows(p, 0, p->M, p->scratch, kLd);"
FIXED = "const int kLd = N;  // the scratch tile's leading dimension\n  gemm_rows(p, 0, p->M, p->scratch, kLd);"
CHUNK_RE = re.compile(r"static const int kChunkRows = (\d+);  // cuco:knob chunk_rows")
UNDECLARED = re.compile(r"kLd\W{0,3} was not declared")  # gcc quotes the name by the locale


def diff(old: str, new: str, why: str) -> str:
    return f"{why}\n\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n"


def edit(prompt: str, old: str, new: str, why: str) -> str:
    """The edit in the format the prompt asks for: SEARCH/REPLACE, or the whole block rewritten."""
    if "Answer with the new text of every EVOLVE-BLOCK" not in prompt:
        return diff(old, new, why)
    source = prompt.split("# Parent program", 1)[1].split("```\n", 1)[1]
    block = source[source.index("// EVOLVE-BLOCK-START") : source.index("// EVOLVE-BLOCK-END")]
    return f"{why}\n```cpp\n{block.replace(old, new)}// EVOLVE-BLOCK-END\n```\n"


class Model:
    """Answers cuco's prompts like a model that makes one mistake and fixes it when shown the error."""

    def __init__(self) -> None:
        self.mutations: list[str] = []
        self.repairs: list[str] = []

    def __call__(self, req) -> Reply:
        text = req.prompt_text
        if "review an evolutionary search" in text:
            return Reply('["Keep the scratch tile contiguous"]')
        if "# A candidate that failed" in text:
            self.repairs.append(text)
            return Reply(diff(BROKEN, FIXED, "Declare the leading dimension before the call that uses it."))
        self.mutations.append(text)
        if len(self.mutations) == 1:
            return Reply(edit(text, CALL, BROKEN, "Name the scratch tile's leading dimension."))
        parent = text.split("# Parent program", 1)[1]
        chunk = int(CHUNK_RE.search(parent).group(1))
        old = CHUNK_RE.search(parent).group(0)
        return Reply(edit(text, old, old.replace(f"= {chunk};", f"= {chunk * 2};"), "Larger chunks."))


@pytest.mark.parametrize("protocol", ["openai-compat", "anthropic"])
async def test_a_compiler_error_reaches_the_next_prompts_and_its_repair_is_credited(llm_env, tmp_path, protocol):
    model = Model()
    run_id = f"memory-{protocol}"
    with FakeLLMServer(responder=model) as srv:
        if protocol == "anthropic":  # the official SDK, pointed at the test server
            llm_env.setenv("ANTHROPIC_BASE_URL", srv.url)
            name = "anthropic:claude-haiku-4-5"
        else:
            name = f"openai-compat:coder@{srv.url}/v1"
        config = RunConfig(
            seed=1,
            max_evals=4,
            concurrency=1,
            islands=1,
            llm=[name],
            mutator="llm",
            meta_every=0,
            reverify_best=False,
            repair_rate=1000.0,  # a repair whenever a failure is on offer: the test reads its prompt
        )
        engine = await Engine.create(tmp_path, load_workload("demo"), config, run_id=run_id)
        try:
            assert await asyncio.wait_for(engine.run(), 300) == "finished"
        finally:
            await engine.close()

    rs = ReadStore(tmp_path)
    try:
        rows = rs.fetchall(
            "SELECT id, parent_id, operator, status, reason FROM candidates WHERE run_id=? ORDER BY id", (run_id,)
        )
        calls = rs.fetchall("SELECT prompt_hash, candidate_id FROM llm_calls WHERE run_id=? ORDER BY id", (run_id,))
        prompts = [(json.loads(rs.blobs.get_text(c["prompt_hash"])), c["candidate_id"]) for c in calls]
        report = build_report(rs, run_id)
    finally:
        rs.close()
    by_op = {r["operator"]: r for r in rows}
    failed = next((r for r in rows if r["status"] == "failed"), None)
    assert failed is not None, [(r["id"], r["operator"], r["status"], r["reason"]) for r in rows]
    assert UNDECLARED.search(failed["reason"]), failed["reason"]

    # the repair prompt: the failed child, the compiler's error and the line it points at
    assert len(model.repairs) == 1, [r["operator"] for r in rows]
    repair = model.repairs[0]
    assert UNDECLARED.search(repair) and BROKEN in repair
    assert re.search(r">\s*\d+ \|\s+" + re.escape(BROKEN), repair), "the line the compiler points at is shown"
    repaired = by_op["llm-repair"]
    assert repaired["status"] == "done" and repaired["parent_id"] == failed["id"]

    # every mutation prompt after the failure carries it: what it changed and why it failed
    later = model.mutations[1:]
    assert later, "no mutation after the repair"
    for text in later:
        assert "# Recent attempts that failed" in text and f"Candidate {failed['id']}" in text
        assert UNDECLARED.search(text) and f"+  {BROKEN}" in text
        for hidden in ("odd", "sliver"):  # the demo's hidden configs never reach a model
            assert not re.search(rf"\b{hidden}\b", text)

    # the report's counts are disjoint and add up to what was evaluated
    assert report["failed"] == 1 and report["evaluated"] == 4
    counted = report["correct"] + report["incorrect"] + report["failed"] + report["refused_count"]
    assert counted == report["evaluated"]

    # the audit log says what each prompt showed, and which candidate came of it
    shown = [(p.get("shown") or {}, cid) for p, cid in prompts]
    assert ({"repair_of": failed["id"], "failures": [failed["id"]]}, repaired["id"]) in shown
    assert any(failed["id"] in s.get("failures", []) and "parent" in s for s, _ in shown)


def _failed_view(source: str, reason: str, feedback: str, status: str = "failed"):
    from llm_helpers import view

    return view(source, cid=7, status=status, operator="llm-diff", speedup=None, reason=reason, feedback=feedback)


def test_an_nvcc_error_shows_the_line_it_points_at_and_a_long_log_is_cut_with_a_marker():
    workload = load_workload("demo")
    source = "\n".join(f"line {i}" for i in range(1, 80)) + "\n"
    cascade = "".join(f'candidate.cpp({60 + i}): error: expected a ";" (cascade {i})\n' for i in range(40))
    log = 'candidate.cpp(57): error: identifier "kTile" is undefined\n' + "note: noise\n" * 2000 + cascade
    from engine.llm.failure_memory import ERROR_CHARS, explain

    text = explain(_failed_view(source, "build failed with exit code 2", log), workload)
    assert 'identifier "kTile" is undefined' in text
    assert re.search(r">\s+57 \| line 57", text) and "56 | line 56" in text
    assert "note: noise" not in text and "more diagnostic lines left out" in text and len(text) <= ERROR_CHARS


def test_a_mismatch_on_a_hidden_size_is_shown_without_its_name():
    workload = load_workload("demo")
    reason = "config sliver: wrong output on rank 1 at index 40 (expected 2.5, got 0)"
    from engine.llm.failure_memory import failures_section

    text = failures_section([_failed_view("x\n", reason, f"verify: {reason}", status="incorrect")], workload)
    assert "wrong output on rank 1 at index 40 (expected 2.5, got 0)" in text
    assert "sliver" not in text and "<hidden config>" in text
