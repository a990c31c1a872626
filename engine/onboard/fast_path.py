"""The fast path: an LLM rewrites a host-driven program into a device-initiated one, correctness first.

Stage A adds the device-side setup (memory, window registration, device communicator) while keeping the
host collectives; stage B replaces the host collectives with device-initiated communication. Every
answer is built and verified through the caller's `evaluate(source)`; a failure is explained by an LLM
judge and fed back. Budgets: 5 iterations for A, 10 for B. The result keeps (or gains) EVOLVE-BLOCK
markers around what the slow path may change, and becomes generation 0.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .. import blocks
from ..llm.budget import BudgetExhausted
from ..llm.clients import ChatRequest
from ..llm.errors import LLMError
from ..llm.prompts import scrub, system_prompt, trim

if TYPE_CHECKING:
    from ..llm.service import LLMService
    from ..store.store import Store
    from ..workload import Workload

HOST_COLLECTIVE_RE = re.compile(
    r"\bnccl(AllGather|AllReduce|ReduceScatter|Broadcast|Bcast|Reduce|AlltoAll|AllToAll|Gather|Scatter|Send|Recv)"
    r"\s*\("
)
_FENCE_RE = re.compile(r"```[A-Za-z0-9_+\-]*[ \t]*\n(.*?)```", re.DOTALL)
FEEDBACK_CHARS = 2500
MAX_TOKENS = 16000
ANNOTATE_ATTEMPTS = 2


class EvalFeedback(Protocol):
    """What the evaluation callback returns (engine.evaluation.evaluation.EvalOutcome fits)."""

    status: str  # done | incorrect | failed
    reason: str
    feedback: str
    speedup: float | None


Evaluate = Callable[[str], Awaitable[EvalFeedback]]


@dataclass(frozen=True)
class HostCall:
    name: str
    line: int
    text: str


def host_collectives(source: str) -> list[HostCall]:
    """NCCL collectives called from host code (a regex analysis; comments are skipped)."""
    calls = []
    for i, line in enumerate(source.splitlines(), 1):
        code = line.split("//", 1)[0]
        for m in HOST_COLLECTIVE_RE.finditer(code):
            calls.append(HostCall("nccl" + m.group(1), i, line.strip()[:120]))
    return calls


def extract_program(answer: str) -> str | None:
    """The program in an answer: its largest code fence."""
    fences = _FENCE_RE.findall(answer)
    if not fences:
        return None
    program = max(fences, key=len)
    return program if program.endswith("\n") else program + "\n"


def _strip_markers(source: str) -> list[str]:
    return [
        line.rstrip() for line in source.splitlines() if not (blocks.START_RE.match(line) or blocks.END_RE.match(line))
    ]


def check_markers(source: str) -> str | None:
    """None when the program has valid EVOLVE-BLOCKs, else why not."""
    try:
        found = blocks.parse_blocks(source)
        blocks.check_block_bodies(source)
    except blocks.BlockError as exc:
        return str(exc)
    return None if found else "the program has no EVOLVE-BLOCK"


STAGE_TEXT = {
    "A": (
        "Stage A of 2: add the device-side infrastructure the device-initiated version will need "
        "(symmetric / registered memory, window registration, a device communicator, as the API notes "
        "describe), but KEEP the existing host collectives so the program stays correct. Do not remove any "
        "host collective yet."
    ),
    "B": (
        "Stage B of 2: replace every host collective with device-initiated communication (kernels that "
        "move the data themselves, e.g. LSA load/store, GIN or NVSHMEM puts with signals), overlapping it "
        "with compute where possible. No host collective may remain."
    ),
}

ANSWER_RULES = (
    "Answer with the complete new program in one code fence. Keep the program's C ABI entry points. "
    "Mark the regions the later search may change (kernels, the communication schedule, tuning constants) "
    "with lines `// EVOLVE-BLOCK-START <name>` and `// EVOLVE-BLOCK-END` (blocks do not nest, names are "
    "unique, no preprocessor line inside a block)."
)


@dataclass
class TransformResult:
    ok: bool
    source: str  # the final program (marked), or the last attempt
    stage: str  # the stage reached: A | B | annotate | done
    reason: str = ""
    speedup: float | None = None
    iterations: dict[str, int] = field(default_factory=dict)
    call_ids: list[int] = field(default_factory=list)


class FastPath:
    def __init__(
        self,
        service: LLMService,
        model: str,
        workload: Workload,
        evaluate: Evaluate,
        *,
        store: Store | None = None,
        run_id: str | None = None,
        budget_a: int = 5,
        budget_b: int = 10,
        node_facts: str | None = None,
        log: Callable[[str], None] | None = None,
        accept_status: str = "done",
    ):
        self.service = service
        # "done" (verified on every rank and config); "built" when the caller can only build (no GPU here)
        self.accept_status = accept_status
        self.model = model
        self.workload = workload
        self.evaluate = evaluate
        self.store = store
        self.run_id = run_id
        self.budgets = {"A": budget_a, "B": budget_b}
        self.system = system_prompt(workload, node_facts).replace(
            "- Change only the text between", "- (For the later search:) change only the text between"
        )
        self.log = log or (lambda text: None)
        self.call_ids: list[int] = []
        self.speedup: float | None = None

    async def _chat(self, prompt: str, purpose: str, max_tokens: int = MAX_TOKENS, system: str | None = None) -> str:
        out = await self.service.chat(
            self.model,
            ChatRequest(
                system or self.system, [{"role": "user", "content": prompt}], temperature=0.4, max_tokens=max_tokens
            ),
            store=self.store,
            run_id=self.run_id,
            purpose=purpose,
        )
        if out.call_id is not None:
            self.call_ids.append(out.call_id)
        return out.text

    async def judge(self, source: str, result: EvalFeedback) -> str:
        """An LLM's explanation of a failure (empty when the judge itself fails)."""
        prompt = (
            f"This program failed its evaluation.\n\nVerdict: {result.status}: {scrub(result.reason, self.workload)}\n"
            f"Details:\n{scrub(trim(result.feedback, FEEDBACK_CHARS), self.workload)}\n\n"
            f"```\n{source}```\n\nExplain the most likely cause in at most five sentences and say "
            "precisely how to fix it. Do not write the whole program."
        )
        try:
            return (await self._chat(prompt, "judge", max_tokens=800)).strip()
        except LLMError as err:
            self.log(f"judge unavailable: {err}")
            return ""

    def _prompt(self, stage: str, current: str, feedback: str) -> str:
        calls = host_collectives(current)
        analysis = (
            "Host collectives found:\n" + "\n".join(f"- line {c.line}: {c.name}: `{c.text}`" for c in calls)
            if calls
            else "No host NCCL collective was found by the analyzer."
        )
        parts = [STAGE_TEXT[stage], analysis, f"Current program:\n```\n{current}```"]
        if feedback:
            parts.append(f"Your previous attempt was rejected:\n{feedback}")
        parts.append(ANSWER_RULES)
        return "\n\n".join(parts)

    async def _stage(self, stage: str, start: str, iterations: dict[str, int]) -> tuple[bool, str, str]:
        current, feedback = start, ""
        for i in range(1, self.budgets[stage] + 1):
            iterations[stage] = i
            answer = await self._chat(self._prompt(stage, current, feedback), "transform")
            program = extract_program(answer)
            if program is None:
                feedback = "the answer holds no code fence with the program"
                continue
            if stage == "B":
                left = host_collectives(program)
                if left:
                    feedback = "host collectives remain: " + ", ".join(f"{c.name} (line {c.line})" for c in left)
                    current = program
                    continue
            result = await self.evaluate(program)
            self.log(f"stage {stage} iteration {i}: {result.status} {result.reason}".rstrip())
            if result.status == self.accept_status:
                self.speedup = result.speedup
                return True, program, ""
            diagnosis = await self.judge(program, result)
            feedback = (
                f"{result.status}: {scrub(result.reason, self.workload)}\n"
                f"{scrub(trim(result.feedback, FEEDBACK_CHARS), self.workload)}"
                + (f"\nDiagnosis: {diagnosis}" if diagnosis else "")
            )
            current = program
        return (
            False,
            current,
            f"stage {stage} found no correct program in {self.budgets[stage]} iterations"
            + (f"; last failure: {feedback.splitlines()[0]}" if feedback else ""),
        )

    async def _annotate(self, source: str) -> tuple[str | None, str]:
        problem = check_markers(source)
        if problem is None:
            return source, ""
        for _ in range(ANNOTATE_ATTEMPTS):
            answer = await self._chat(
                f"This verified program needs EVOLVE-BLOCK markers ({problem}). Add `// EVOLVE-BLOCK-START <name>` "
                f"/ `// EVOLVE-BLOCK-END` lines around the code the search may change, changing nothing else: "
                f"not a character of code.\n\n```\n{source}```\n\nAnswer with the whole program in one code fence.",
                "transform",
            )
            marked = extract_program(answer)
            if marked is None:
                problem = "the answer holds no code fence"
                continue
            problem = check_markers(marked)
            if problem is None and _strip_markers(marked) != _strip_markers(source):
                problem = "the answer changed code besides adding markers"
            if problem is None:
                return marked, ""
        return None, f"cannot mark EVOLVE-BLOCKs: {problem}"

    async def run(self, source: str | None = None) -> TransformResult:
        iterations: dict[str, int] = {}
        current = source if source is not None else self.workload.seed_source
        stage = "A"
        try:
            ok, current, reason = await self._stage("A", current, iterations)
            if ok:
                stage = "B"
                ok, current, reason = await self._stage("B", current, iterations)
            if ok:
                stage = "annotate"
                marked, reason = await self._annotate(current)
                if marked is not None:
                    return TransformResult(
                        True, marked, "done", speedup=self.speedup, iterations=iterations, call_ids=self.call_ids
                    )
        except BudgetExhausted as exc:
            reason = f"budget: {exc}"
        except LLMError as exc:
            reason = f"the model failed: {exc}"
        return TransformResult(False, current, stage, reason=reason, iterations=iterations, call_ids=self.call_ids)
