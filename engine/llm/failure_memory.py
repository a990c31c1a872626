"""Failure memory: what recent failed children of the run tell a model writing the next one.

The engine picks the failures (`population.recent_failures`: the island's newest first, then the run's), each as a
`CandidateView` whose `feedback` is the evaluation's full feedback (the compiler log, the mismatch summary,
the timeout or the refusal) and whose `changes` is its diff against its parent. This module turns them into
prompt text: the error trimmed to what matters, with the candidate's source lines the compiler points at,
bounded in size, with hidden configs scrubbed. The same text feeds the repair operator's prompt.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .keys import redact
from .prompts import DIFF_FORMAT, describe, scrub, trim

if TYPE_CHECKING:
    from ..candidate_view import CandidateView
    from ..workload import Workload

ERROR_CHARS = 1400  # one failure's explanation
CHANGES_CHARS = 1200  # one failure's diff against its parent
POINTED_LINES = 6  # source lines shown around the places the compiler names
ERROR_LINES = 12  # compiler diagnostic lines kept
# `candidate.cpp:57:12: error: ...` (gcc, clang, nvcc's host pass) and `candidate.cu(57): error: ...` (nvcc)
LOCATION = re.compile(r"(?P<file>[\w./-]+?\.(?:cpp|cc|cu|cuh|h|hpp|inc))(?::(?P<a>\d+)(?::\d+)?:|\((?P<b>\d+)\):)")
DIAGNOSTIC = re.compile(r"\b(error|undefined reference|fatal)\b", re.IGNORECASE)


def changes(parent_source: str | None, source: str, limit: int = CHANGES_CHARS) -> str:
    """A unified diff of the child against its parent (empty without a parent), bounded with a marker."""
    if not parent_source:
        return ""
    lines = difflib.unified_diff(parent_source.splitlines(), source.splitlines(), "parent", "child", n=1, lineterm="")
    return trim("\n".join(list(lines)[2:]), limit)


def pointed_lines(log: str, source: str, candidate_file: str) -> list[int]:
    """Line numbers of the candidate's file that the log's diagnostics point at, in order, without repeats."""
    name = candidate_file.rsplit("/", 1)[-1]
    out: list[int] = []
    for line in log.splitlines():
        if not DIAGNOSTIC.search(line):
            continue
        for m in LOCATION.finditer(line):
            if m.group("file").rsplit("/", 1)[-1] != name:
                continue
            n = int(m.group("a") or m.group("b"))
            if 1 <= n <= source.count("\n") + 1 and n not in out:
                out.append(n)
    return out


def _excerpt(source: str, numbers: list[int]) -> str:
    lines = source.splitlines()
    shown: list[str] = []
    last = 0
    for n in numbers[:POINTED_LINES]:
        lo, hi = max(1, n - 1), min(len(lines), n + 1)
        if lo > last + 1 and shown:
            shown.append("   ...")
        for i in range(max(lo, last + 1), hi + 1):
            mark = ">" if i == n else " "
            shown.append(f"{mark}{i:5d} | {lines[i - 1]}")
        last = max(last, hi)
    return "\n".join(shown)


def explain(view: CandidateView, workload: Workload, limit: int = ERROR_CHARS) -> str:
    """Why the candidate failed, as a model should read it: the reason; for a build, the compiler's
    diagnostic lines and the candidate's lines they point at; bounded, scrubbed, redacted."""
    reason = (view.reason or "").strip()
    log = view.feedback or ""
    parts = [reason] if reason else []
    lines = [line.rstrip() for line in log.splitlines()]
    numbers = pointed_lines(log, view.source, workload.candidate_name)
    diagnostics = [x for x in lines if DIAGNOSTIC.search(x) and x.strip() and x.strip() not in reason]
    if diagnostics:
        kept = diagnostics[:ERROR_LINES]
        more = len(diagnostics) - len(kept)
        parts.append("\n".join(kept) + (f"\n[... {more} more diagnostic lines left out ...]" if more > 0 else ""))
    if numbers:
        parts.append("the lines it points at (numbered as in the candidate's file):\n" + _excerpt(view.source, numbers))
    rest = log.replace(reason, "", 1).strip() if reason else log.strip()
    if not diagnostics and not numbers and rest:  # a timeout's or a crash's log: what the program printed
        parts.append(rest)
    return scrub(redact(trim("\n".join(parts), limit)), workload)


def failures_section(failures: Iterable[CandidateView], workload: Workload) -> str:
    """The mutation prompt's section on recent failures (empty when there are none)."""
    items = []
    for f in failures:
        head = f"## Candidate {f.id} ({f.operator}, {f.status})"
        point = " ".join(f"{k}={v}" for k, v in sorted(f.descriptor.items()))
        body = [head, f"design point: {point}" if point else ""]
        if f.changes:
            body.append(f"what it changed against its parent:\n```diff\n{f.changes}\n```")
        body.append("why it failed:\n" + explain(f, workload))
        items.append("\n".join(x for x in body if x))
    if not items:
        return ""
    return (
        "# Recent attempts that failed (do not repeat their mistakes)\n"
        "Each was evaluated and rejected by the harness; the reason is what the build or the verification "
        "reported.\n\n" + "\n\n".join(items)
    )


def repair_prompt(failed: CandidateView, workload: Workload, parent: CandidateView | None = None) -> str:
    """The repair operator's user message: the failed child in full, why it failed, and the job of fixing it
    with SEARCH/REPLACE edits against its own text."""
    parts = [
        "# A candidate that failed",
        describe(failed, workload, feedback=False),
        f"```\n{failed.source}```",
        "# Why it failed",
        explain(failed, workload),
    ]
    if failed.changes:
        parts += ["# What it changed against its parent (a correct program)", f"```diff\n{failed.changes}\n```"]
    if parent is not None and parent.speedup is not None:
        parts.append(f"Its parent, candidate {parent.id}, was correct at {parent.speedup:.3f}x.")
    parts += [
        "# Your job",
        "Fix this candidate so that it builds and is correct on every problem size, keeping the idea that "
        "should make it faster. Edit the failed candidate's text above (not its parent's).",
        DIFF_FORMAT,
    ]
    return "\n\n".join(parts)
