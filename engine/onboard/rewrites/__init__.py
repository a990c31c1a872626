"""Schedule rewrites that need no LLM: mechanical transformations of a host program's repeated region,
each offered only where the analysis shows its preconditions. One module per rewrite; REGISTRY orders
them as they compose (graph replay last: it captures what the others produced)."""

from __future__ import annotations

from .base import Edit, Offer, Refusal, Rewrite, RewriteError, Rewritten, apply_edits, place
from .boundary_first import BoundaryFirst
from .comm_config import CommConfig
from .comm_stream import CommStream
from .facts import FactsError, ScheduleFacts, build_facts, facts_from_analysis
from .graph_replay import GraphReplay
from .keep_scratch import KeepScratch
from .lsa_collective import LsaCollective
from .lsa_sendrecv import LsaSendrecv
from .nccl_register import NcclRegister

REGISTRY: tuple[Rewrite, ...] = (
    BoundaryFirst(),
    CommStream(),
    NcclRegister(),
    CommConfig(),
    LsaCollective(),
    LsaSendrecv(),
    KeepScratch(),
    GraphReplay(),
)
BY_NAME = {r.name: r for r in REGISTRY}

__all__ = [
    "REGISTRY",
    "BY_NAME",
    "Edit",
    "Offer",
    "Refusal",
    "Rewritten",
    "RewriteError",
    "FactsError",
    "ScheduleFacts",
    "build_facts",
    "facts_from_analysis",
    "check_all",
    "rewrite_program",
]


def check_all(facts: ScheduleFacts) -> list[Offer | Refusal]:
    return [r.check(facts) for r in REGISTRY]


def rewrite_program(
    facts: ScheduleFacts, names: list[str], knobs: dict[str, str] | None = None
) -> tuple[dict[str, bytes], list[str]]:
    """The program's files with the named rewrites applied in registry order, and each one's note. The
    facts are read again from the rewritten text before each next rewrite, whose preconditions are checked
    on what the previous ones produced."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise RewriteError(f"no rewrite named {unknown[0]!r}; known: {', '.join(BY_NAME)}")
    notes = []
    for r in REGISTRY:
        if r.name not in names:
            continue
        verdict = r.check(facts)
        if isinstance(verdict, Refusal):
            raise RewriteError(f"{r.name} does not apply: {verdict.reason}")
        done = r.rewrite(facts, knobs or {})
        edits = place(facts, done)
        texts = apply_edits(facts.texts, edits)
        facts = facts.reread(texts, edits)
        notes.append(done.note)
    return facts.texts, notes
