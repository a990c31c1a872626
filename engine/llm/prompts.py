"""Prompts for mutations: a system message from the workload, and a user message with the parent, its
feedback, inspirations, recommendations and rejected candidates.

Hidden problem configs (public: false) and private metrics never appear: only `CandidateView`'s public
fields are used, hidden config names are scrubbed from any feedback text, and metrics keyed by a hidden
config are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import blocks
from ..timeline.timeline import prompt_summary
from .keys import redact

if TYPE_CHECKING:
    from ..search.mutators.base import CandidateView
    from ..workload import Workload

FEEDBACK_CHARS = 1500
INSPIRATION_CHARS = 6000
REJECTED_CHARS = 1500
HIDDEN = "<hidden config>"
TIMELINE_HEAD = (
    "where its time went (one profiled call per size after the timed loop; per rank: communication not "
    "hidden behind compute, idle gaps, the dominant kernel or transfer):\n"
)

DIFF_FORMAT = """Answer with one or more SEARCH/REPLACE edits, each exactly in this form:

<<<<<<< SEARCH
lines copied exactly from the parent (inside an EVOLVE-BLOCK)
=======
the new lines
>>>>>>> REPLACE

Quote enough lines that each SEARCH matches exactly one place. Before the edits, say in two or three
sentences what you change and why it should be faster."""

FULL_FORMAT = """Answer with the new text of every EVOLVE-BLOCK you change, markers included, inside one
code fence:

```
// EVOLVE-BLOCK-START <name>
... the new body ...
// EVOLVE-BLOCK-END
```

Keep each block's name. Blocks you leave out stay as they are. Before the code, say in two or three
sentences what you change and why it should be faster."""


def hidden_names(workload: Workload) -> list[str]:
    return [c.name for c in workload.configs if not c.public]


def scrub(text: str, workload: Workload) -> str:
    """Remove hidden config names (whole words) from a text shown to a model."""
    for name in sorted(hidden_names(workload), key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", HIDDEN, text)
    return text


def public_only(value: Any, hidden: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: public_only(v, hidden) for k, v in value.items() if k not in hidden}
    if isinstance(value, list):
        return [public_only(v, hidden) for v in value if not (isinstance(v, dict) and v.get("name") in hidden)]
    return value


def trim(text: str, limit: int) -> str:
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit // 3) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters left out ...]\n{tail}"


def system_prompt(workload: Workload, node_facts: str | None = None) -> str:
    parts = [
        "You are an expert GPU performance engineer. You improve a multi-GPU program by co-designing its "
        "computation and its communication (device-initiated communication, overlap, fusion, chunking).",
        f"# Workload: {workload.name}",
    ]
    if workload.description:
        parts.append(workload.description.strip())
    parts.append(f"Language: {workload.language}; ranks per job: {workload.ranks}.")
    if workload.task:
        parts += ["## Task", workload.task.strip()]
    if workload.api_notes:
        parts += ["## API notes", workload.api_notes.strip()]
    space = workload.design_space
    if space.dimensions:
        lines = [
            "## Design space",
            "A program's point is given by `// cuco:design k=v ...` lines and `// cuco:knob NAME` values in "
            "its blocks. Dimensions (values; default):",
        ]
        for d in space.dimensions.values():
            kind = " (a knob: the value on the `// cuco:knob` line)" if d.knob else ""
            lines.append(f"- {d.name}: {', '.join(d.values)}; default {d.default}{kind}")
        if space.variants:
            lines.append(
                "Known implementations: "
                + "; ".join(f"{v.name} ({' '.join(f'{k}={x}' for k, x in v.point.items())})" for v in space.variants)
            )
        parts.append("\n".join(lines))
    public = workload.public_configs
    if public:
        parts.append(
            "## Problem sizes you can see\n"
            + "\n".join(f"- {c.name}: {json.dumps(c.params, sort_keys=True)}" for c in public)
            + "\nOther sizes, not shown, are verified too: do not specialise the code to these."
        )
    if node_facts:
        parts += ["## The GPU node it runs on", node_facts.strip()]
    parts.append(
        "## Rules\n"
        "- Change only the text between `EVOLVE-BLOCK-START` and `EVOLVE-BLOCK-END`; keep the markers and "
        "the block names. Everything else is frozen.\n"
        "- No preprocessor lines (`#include`, `#define`, `#if`, ...) inside a block.\n"
        "- The harness checks every rank's output against the reference (bit-exact for data movement) on "
        "several problem sizes, and times baseline and candidate side by side. Output printed by the "
        "program is ignored.\n"
        "- Keep `// cuco:design` lines truthful: update them when you change the design."
    )
    return "\n\n".join(parts)


def describe(c: CandidateView, workload: Workload, *, feedback: bool = True) -> str:
    hidden = set(hidden_names(workload))
    facts = [f"candidate {c.id}", f"generation {c.generation}", f"made by {c.operator}", f"status {c.status}"]
    if c.speedup is not None:
        facts.append(f"speedup {c.speedup:.3f}x over the baseline")
    if c.time_ms is not None:
        facts.append(f"time {c.time_ms:.4g} ms")
    lines = [", ".join(facts)]
    if c.descriptor:
        lines.append("design point: " + " ".join(f"{k}={v}" for k, v in sorted(c.descriptor.items())))
    metrics = public_only(c.public_metrics, hidden)
    if metrics:
        lines.append("per-size results: " + scrub(json.dumps(metrics, sort_keys=True, default=str), workload))
    if feedback and c.feedback:
        lines.append("evaluation feedback:\n" + scrub(trim(c.feedback, FEEDBACK_CHARS), workload))
    if feedback and c.timeline:
        summary = prompt_summary(c.timeline, public={x.name for x in workload.public_configs})
        if summary:
            lines.append(TIMELINE_HEAD + scrub(trim(summary, FEEDBACK_CHARS), workload))
    return "\n".join(lines)


def _bodies(source: str) -> str:
    try:
        bs = blocks.parse_blocks(source)
    except blocks.BlockError:
        return source
    lines = source.splitlines(keepends=True)
    return "".join("".join(lines[b.start : b.end + 1]) for b in bs)


def mutate_prompt(
    kind: str,
    parent: CandidateView,
    workload: Workload,
    *,
    second: CandidateView | None = None,
    inspirations: Sequence[CandidateView] = (),
    rejected: Sequence[CandidateView] = (),
    recommendations: Sequence[str] = (),
    strategy: str | None = None,
    failures: str = "",
) -> str:
    """The user message for one mutation: kind is diff | full | cross. `failures` is failure memory's
    section (engine/llm/failure_memory.py), shown after the parent."""
    parts = ["# Parent program", describe(parent, workload), f"```\n{parent.source}```"]
    if kind == "cross" and second is not None:
        parts += [
            "# Second parent",
            describe(second, workload, feedback=False),
            "Its blocks:",
            f"```\n{_bodies(second.source)}```",
        ]
    insp = [c for c in inspirations if c.id != parent.id and (second is None or c.id != second.id)]
    if insp:
        budget = INSPIRATION_CHARS
        parts.append("# Other programs found so far (for ideas)")
        for c in insp:
            body = _bodies(c.source)
            if len(body) > budget:
                parts.append(describe(c, workload, feedback=False))
                continue
            budget -= len(body)
            parts += [describe(c, workload, feedback=False), f"```\n{body}```"]
    if recommendations:
        parts.append(
            "# What earlier evaluations taught\n" + "\n".join(f"- {scrub(r, workload)}" for r in recommendations)
        )
    if rejected:
        parts.append("# Rejected by the operator: do not repeat these")
        for c in rejected:
            reason = scrub(c.reject_reason or "no reason given", workload)
            parts.append(
                f"- candidate {c.id} ({' '.join(f'{k}={v}' for k, v in sorted(c.descriptor.items()))}): "
                f"{reason}\n```\n{trim(_bodies(c.source), REJECTED_CHARS)}\n```"
            )
    if failures:
        parts.append(failures)
    if strategy:
        parts.append(strategy_section(strategy, workload))
    if kind == "diff":
        parts += [
            "# Your job",
            "Make one focused change to the parent that should make it faster while staying correct.",
            DIFF_FORMAT,
        ]
    elif kind == "full":
        parts += [
            "# Your job",
            "Rewrite the parent's EVOLVE-BLOCKs: a bolder restructuring (a different "
            "placement, synchronisation or communication scheme) that should be faster and stay correct.",
            FULL_FORMAT,
        ]
    else:
        parts += [
            "# Your job",
            "Combine the strengths of the parent and the second parent into one program "
            "that should be faster than both and stay correct.",
            FULL_FORMAT,
        ]
    return "\n\n".join(parts)  # sources are shown as they are; every other text was scrubbed


def strategy_section(strategy: str, workload: Workload) -> str:
    """The strategy a mutation follows (one of the run's population), scrubbed like any other text."""
    return (
        "# Strategy for this change\n"
        + scrub(redact(strategy), workload)
        + "\nFollow this strategy; if it cannot apply to this parent, say so and make the closest useful change."
    )


def rejection_message(reason: str, kind: str) -> str:
    fmt = DIFF_FORMAT if kind == "diff" else FULL_FORMAT
    return (
        f"Your answer was rejected: {reason}\n\nTry again: answer in the required format, changing "
        f"only the text inside the EVOLVE-BLOCKs.\n\n{fmt}"
    )


def novelty_message(similarity: float) -> str:
    return (
        f"Your child is too similar to a program already on this island (similarity {similarity:.3f}). "
        "Propose a substantively different change."
    )
