"""`cuco init --llm MODEL`: an LLM completes what init left as CUCO-TODO in the seed. Each answer is
built and verified by the frozen harness like any candidate (engine.evaluation.evaluation.evaluate_source); the
first verified one becomes candidate.cu, and its setup() is copied into the frozen baseline so that the
seed still measures against its own code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.llm.budget import BudgetExhausted
from engine.llm.clients import ChatRequest
from engine.llm.errors import LLMError
from engine.onboard.fast_path import extract_program

BASELINE_FILE = "baseline.cu"  # init's frozen baseline, a harness source under this name
SETUP_START = "  int setup() {\n"
SETUP_END = "\n    return 0;\n  }\n"
PROMPT = """This CUDA program was made from a user's program by `cuco init`. Lines marked CUCO-TODO are what it
could not place mechanically. Complete exactly those parts (replace each CUCO-TODO comment and the
placeholder next to it with working code), change nothing else, keep every EVOLVE-BLOCK marker, and
answer with the whole program in one code fence.

The TODOs:
{todos}

{feedback}```
{source}```
"""


class Verdict(Protocol):
    """What a completion reads of an evaluation (engine.evaluation.evaluation.EvalOutcome)."""

    @property
    def status(self) -> str: ...

    @property
    def reason(self) -> str: ...


@dataclass
class Completion:
    ok: bool
    reason: str
    attempts: int


def setup_body(source: str) -> str | None:
    """The body of Program::setup() (init writes it between these exact lines)."""
    start = source.find(SETUP_START)
    if start < 0:
        return None
    end = source.find(SETUP_END, start)
    return source[start : end + len(SETUP_END)] if end > 0 else None


def with_setup(source: str, body: str) -> str:
    old = setup_body(source)
    return source.replace(old, body, 1) if old else source


def settled_baseline(baseline: str, program: str) -> str:
    """The frozen baseline as an answer leaves it: the answer's setup(), and every CUCO-TODO line whose code
    the answer kept unchanged (the value init chose, accepted) without its marker. An answer is verified
    against this baseline, so that the reference computes what the answer's setup asks for."""
    body = setup_body(program)
    settled = with_setup(baseline, body) if body is not None else baseline
    kept = {line.split("//", 1)[0].rstrip() for line in program.splitlines() if "CUCO-TODO" not in line}
    out = []
    for line in settled.splitlines(keepends=True):
        code = line.split("//", 1)[0].rstrip()
        if "CUCO-TODO" in line and code.strip() and code in kept:
            line = code + "\n"
        out.append(line)
    return "".join(out)


async def complete_todos(
    root: Path,
    todos: list[str],
    chat: Callable[[str], Awaitable[str]],
    evaluate: Callable[[str, str], Awaitable[Verdict]],
    attempts: int = 3,
    log: Callable[[str], None] = lambda s: None,
) -> Completion:
    """Ask, build and verify up to `attempts` times; on success rewrite candidate.cu and baseline.cu.
    evaluate(program, baseline) verifies the program against that baseline source."""
    cand_file, base_file = root / "candidate.cu", root / BASELINE_FILE
    source = cand_file.read_text()
    feedback = ""
    for attempt in range(1, attempts + 1):
        try:
            answer = await chat(
                PROMPT.format(todos="\n".join(f"- {t}" for t in todos), feedback=feedback, source=source)
            )
        except (LLMError, BudgetExhausted) as exc:
            return Completion(False, f"the model failed: {exc}", attempt)
        program = extract_program(answer)
        if program is None:
            feedback = "Your previous answer held no code fence.\n\n"
            continue
        if "CUCO-TODO" in program:
            feedback = "Your previous answer still had CUCO-TODO lines.\n\n"
            continue
        baseline = settled_baseline(base_file.read_text(), program)
        result = await evaluate(program, baseline)
        log(f"attempt {attempt}: {result.status} {result.reason}".rstrip())
        if result.status == "done":
            cand_file.write_text(program)
            base_file.write_text(baseline)
            return Completion(True, "", attempt)
        feedback = f"Your previous answer was built and run: {result.status}: {result.reason}\n\n"
    return Completion(False, f"no verified completion in {attempts} attempts; the TODOs stay for you", attempts)


def chat_with(service, model: str, store=None, run_id: str | None = None):
    """A one-message chat through the project's LLM service (budget, retries, audit log)."""

    async def chat(prompt: str) -> str:
        out = await service.chat(
            model,
            ChatRequest(
                "You complete C++/CUDA programs for a GPU performance tool. Answer with code only in one fence.",
                [{"role": "user", "content": prompt}],
                temperature=0.2,
                max_tokens=16000,
            ),
            store=store,
            run_id=run_id,
            purpose="transform",
        )
        return out.text

    return chat
