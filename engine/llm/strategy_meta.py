"""The meta step of the strategy population: every `meta_every` evaluations, strategies whose children keep
failing are retired, and a model rewrites the weakest ones (and replaces the retired ones) from what worked
and what failed, with the reasons. Only public facts reach the model; what it writes is scrubbed of hidden
config names and of anything shaped like a key before it joins the population."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .clients import ChatRequest
from .errors import LLMError
from .meta import parse_items
from .prompts import scrub
from .strategies import REWRITTEN, Population, Strategy, clean

if TYPE_CHECKING:
    from ..store.store import Store
    from ..workload import Workload
    from .service import LLMService

log = logging.getLogger("cuco.llm.strategies")

MIN_CHILDREN = 2  # a strategy is judged weak only after this many children

SYSTEM = (
    "You maintain the strategies that steer the mutations of an evolutionary search optimising a multi-GPU "
    "program. Each mutation prompt carries one strategy: a short, concrete instruction saying what to try "
    "and why. From the results below, write new strategies that replace the ones marked for rewriting: "
    "keep what worked, avoid what failed, and do not repeat a current strategy. Answer with a JSON list "
    "of strings (one sentence each) and nothing else."
)


@dataclass
class StepResult:
    retired: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    call_id: int | None = None


def _line(s: Strategy) -> str:
    gain = "-" if s.mean_gain is None else f"{s.mean_gain:+.1%}"
    return (
        f'- {s.id}: "{s.text}" | prompts {s.pulls}, children {s.children}, faster {s.successes}, '
        f"failed {s.failures}, mean gain {gain}" + (" (pinned by the operator)" if s.pinned else "")
    )


def rewrite_prompt(pop: Population, workload: Workload, targets: list[tuple[Strategy, str]]) -> str:
    parts = [f"Workload: {workload.name}. {workload.description}".strip()]
    current = pop.active()
    parts.append("Current strategies:\n" + "\n".join(_line(s) for s in current))
    worked = [s for s in pop.strategies if s.successes]
    if worked:
        parts.append(
            "What worked (children correct and faster than their parent):\n"
            + "\n".join(
                f"- {s.id}: {s.successes} of {s.children} children, mean gain {s.mean_gain or 0:+.1%}" for s in worked
            )
        )
    failed = [s for s in pop.strategies if s.reasons]
    if failed:
        parts.append(
            "What failed, with the latest reasons:\n" + "\n".join(f"- {s.id}: " + " | ".join(s.reasons) for s in failed)
        )
    parts.append(
        f"Write {len(targets)} new strateg{'y' if len(targets) == 1 else 'ies'}, one for each of:\n"
        + "\n".join(f"- {t.id}: {why}" for t, why in targets)
    )
    return scrub("\n\n".join(parts), workload)


async def evolve(
    pop: Population,
    service: LLMService,
    model: str,
    store: Store,
    run_id: str,
    workload: Workload,
    *,
    retire_after: int,
    rewrites: int,
    max_tokens: int = 1024,
) -> StepResult:
    """Retire failing strategies, then ask `model` for up to `rewrites` new ones, in the places of the
    failing ones first, then of the weakest. Changes `pop` in place; the caller saves it."""
    result = StepResult()
    failing = pop.failing(retire_after)
    failing_ids = {s.id for s in failing}
    weak = [s for s in pop.weakest(rewrites, MIN_CHILDREN) if s.id not in failing_ids]
    weak_ids = {s.id for s in weak}
    targets = [(s, f"retired: its last {s.streak} children failed") for s in failing]
    targets += [
        (s, f"rewrite: the weakest (mean gain {s.mean_gain or 0:+.1%} over {s.children} children)") for s in weak
    ]
    targets = targets[: max(0, rewrites)]  # new strategies per step: the failing ones' places first
    texts: list[str] = []
    if targets:
        try:
            out = await service.chat(
                model,
                ChatRequest(
                    SYSTEM,
                    [{"role": "user", "content": rewrite_prompt(pop, workload, targets)}],
                    temperature=0.7,
                    max_tokens=max_tokens,
                ),
                store=store,
                run_id=run_id,
                purpose="strategies",
            )
            result.call_id = out.call_id
            texts = [scrub(clean(t), workload) for t in parse_items(out.text)]
        except LLMError as err:
            log.warning("strategy rewrite: %s", err)
    known = {s.text for s in pop.strategies}
    texts = [t for t in dict.fromkeys(texts) if t and t not in known]
    for s in failing:
        pop.retire(s, f"its last {s.streak} children failed")
        result.retired.append(s.id)
    for (target, _), text in zip(targets, texts):
        new = pop.add(text, f"meta: {'rewrote' if target.id in weak_ids else 'replaced'} {target.id}")
        result.added.append(new.id)
        if target.id in weak_ids:
            pop.retire(target, f"rewritten as {new.id}", status=REWRITTEN)
            result.rewritten.append(target.id)
    if not pop.active() and failing:  # no replacement came: keep the least bad one rather than none
        keep = max(failing, key=lambda s: (s.reward, s.successes, -s.failures))
        keep.status, keep.why = "active", ""
        result.retired.remove(keep.id)
    return result
