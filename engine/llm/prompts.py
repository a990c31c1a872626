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
from ..contract import format_speedup
from ..timeline.timeline import prompt_summary
from .declarations import declarations as header_declarations
from .declarations import included_frozen, nccl_headers
from .keys import redact

if TYPE_CHECKING:
    from ..candidate_view import CandidateView
    from ..workload import Workload

FEEDBACK_CHARS = 1500
INSPIRATION_CHARS = 6000
REJECTED_CHARS = 1500
VARIANT_CHARS = 12000  # a shipped implementation's blocks shown as an inspiration
ARCH = re.compile(r"-arch[= ](?:sm_|compute_)(\d+)a?|-gencode[= ]\S*code=sm_(\d+)")
ARCH_NAMES = {"70": "Volta", "80": "Ampere", "86": "Ampere", "89": "Ada", "90": "Hopper", "100": "Blackwell"}
CUDA_RULES = """## What the harness does around every call (cuco_abi.h)
- `cuco_candidate_setup` and `cuco_candidate_teardown` are collective (every rank, same order); allocate
  scratch (flags, staging, streams, events, a devComm, extra windows) in setup, keep it in `ctx->state`, free it
  in teardown.
- `cuco_candidate_run` is one whole operation. It enqueues work and returns; every piece of work it starts (side
  streams, kernels, copy-engine copies) must be joined back to `ctx->stream` (record an event on the side stream,
  `cudaStreamWaitEvent(ctx->stream, ev)`) before it returns. The timer is an event pair on `ctx->stream`, and work
  that escapes it is caught ("work escaped the timed stream").
- Outputs are poisoned (every byte 0xFF, a NaN) before every call: every call must write every output element,
  on every rank; nothing a previous call wrote survives.
- Inputs are read-only (checked bit-exact after every call) and fresh: the benchmark gives every iteration new
  input values, so nothing computed from the inputs may be cached across calls.
- What may persist across calls: what setup made (allocations, windows, communicators, streams, events) and
  monotonic counters. A flag protocol must work on the next call without a reset: number calls with an epoch
  (1, 2, ...) kept in `ctx->state` and wait for `>= epoch`, or reset the flags on the stream before they are used.
- The ranks are aligned (an all-reduce on `ctx->stream`) and the L2 is flushed before every timed call; the time
  is the slowest rank's.
- Every spin-wait must be bounded (`cuco_wait_geq`, `ctx->spin_timeout_ns`) and raise `*ctx->timeout_flag` when
  the bound expires; an unbounded wait that never ends is killed with all ranks.
- Every rank's outputs are verified on every call (bit-exact for moved data, a dtype tolerance for computed
  data), on the sizes shown and on sizes not shown."""
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


def on_gpus(workload: Workload) -> bool:
    return workload.language == "cuda" or workload.launch_gpus > 0


def hardware_facts(workload: Workload, node_facts: str | None = None) -> str:
    """What the program runs on, as far as the workload (and the engine, when it knows the node) says."""
    if not on_gpus(workload):
        cpu = (
            f"A CPU: the {workload.ranks} ranks are threads of one process on one host, sharing its cores and "
            "caches; there is no GPU. Peers are reached only through the workload's link (see the API notes), "
            "whose bandwidth is part of each problem size."
        )
        return cpu + (f"\n{node_facts.strip()}" if node_facts else "")
    lines = [f"One GPU per rank; {workload.launch_gpus or workload.ranks} ranks per job by default."]
    m = ARCH.search(workload.build_command or "")
    if m:
        sm = m.group(1) or m.group(2)
        family = ARCH_NAMES.get(sm, "NVIDIA")
        lines.append(f"Compiled for sm_{sm} ({family}); `ctx->sm_count` gives the SM count at run time.")
    if node_facts:
        lines.append(node_facts.strip())
    return "\n".join(lines)


def declarations_section(workload: Workload) -> str:
    """The declarations a candidate may use: the frozen headers it includes and, for a workload written
    for an NCCL version, that version's device API."""
    parts = []
    for name, text in included_frozen(workload):
        decls = header_declarations(text)
        if decls.strip():
            parts.append(f"// {name} (frozen)\n{decls}")
    nccl = nccl_headers(workload) if workload.language == "cuda" else None
    if nccl is not None:
        parts.append(f"// from {nccl.source}\n{nccl.text}")
    if not parts:
        return ""
    return (
        "## Declarations you may use (generated from the headers; bodies left out)\n```\n"
        + "\n\n".join(parts)
        + "\n```"
    )


def system_prompt(workload: Workload, node_facts: str | None = None) -> str:
    if on_gpus(workload):
        role = (
            "You are an expert GPU performance engineer. You improve a multi-GPU program by co-designing its "
            "computation and its communication (device-initiated communication, overlap, fusion, chunking)."
        )
    else:
        role = (
            "You are an expert performance engineer. You improve a multi-threaded CPU program, a model of a "
            "multi-GPU one, by co-designing its computation and its communication (overlap, chunking, "
            "finer-grained synchronisation)."
        )
    parts = [role, f"# Workload: {workload.name}"]
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
    parts += ["## The hardware it runs on", hardware_facts(workload, node_facts)]
    if workload.language == "cuda":
        parts.append(CUDA_RULES)
    decls = declarations_section(workload)
    if decls:
        parts.append(decls)
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
        facts.append(f"speedup {format_speedup(c.speedup, c.speedup_interval)} over the baseline")
    if c.time_ms is not None:
        facts.append(f"time {c.time_ms:.4g} ms")
    lines = [", ".join(facts)]
    if c.descriptor:
        lines.append("design point: " + " ".join(f"{k}={v}" for k, v in sorted(c.descriptor.items())))
    metrics = public_only(c.public_metrics, hidden)
    if metrics:
        lines.append("per-size results:\n" + scrub(per_size(metrics), workload))
    if feedback and c.feedback:
        lines.append("evaluation feedback:\n" + scrub(trim(c.feedback, FEEDBACK_CHARS), workload))
    if feedback and c.timeline:
        summary = prompt_summary(c.timeline, public={x.name for x in workload.public_configs})
        if summary:
            lines.append(TIMELINE_HEAD + scrub(trim(summary, FEEDBACK_CHARS), workload))
    return "\n".join(lines)


def per_size(metrics: dict[str, Any]) -> str:
    """One line per public size: baseline and candidate times and the speedup with its interval."""
    lines = []
    for name, m in sorted(metrics.items()):
        if not isinstance(m, dict):
            continue
        times = [
            f"{label} {m[key]:.4g} ms"
            for label, key in (("baseline", "baseline_ms"), ("candidate", "candidate_ms"))
            if isinstance(m.get(key), (int, float))
        ]
        speed = format_speedup(m.get("speedup"), m.get("speedup_interval")) if m.get("speedup") else ""
        lines.append(f"- {name}: " + ", ".join(times + ([speed] if speed else [])))
    return "\n".join(lines)


def closest_variant(workload: Workload, parent: CandidateView) -> tuple[str, dict[str, str], str] | None:
    """The shipped implementation nearest the parent's design point (fewest structural dimensions apart,
    never the parent's own point), as (name, point, blocks)."""
    best: tuple[int, int, str, dict[str, str], str] | None = None
    for v in workload.design_space.variants:
        apart = sum(parent.descriptor.get(k) != x for k, x in v.point.items())
        if apart == 0 or not v.bodies:
            continue
        body = "\n".join(v.bodies.values())
        key = (apart, len(body) > VARIANT_CHARS)
        if best is None or key < best[:2]:
            best = (key[0], key[1], v.name, dict(v.point), body)
    return None if best is None else (best[2], best[3], best[4])


def variant_section(workload: Workload, parent: CandidateView, others: Sequence[CandidateView]) -> str:
    """A shipped implementation's code as an inspiration, while nothing the run found beats the parent."""
    if any((c.speedup or 0) > (parent.speedup or 0) for c in others):
        return ""
    found = closest_variant(workload, parent)
    if found is None:
        return ""
    name, point, body = found
    where = " ".join(f"{k}={v}" for k, v in point.items())
    return (
        f"# A known implementation near the parent: {name} ({where})\n"
        "Shipped with the workload and verified; its EVOLVE-BLOCK bodies, for ideas (not measured in this run):\n"
        f"```\n{trim(body, VARIANT_CHARS)}\n```"
    )


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
    shipped = variant_section(workload, parent, inspirations)
    if shipped:
        parts.append(shipped)
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
