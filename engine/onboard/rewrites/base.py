"""The contract every schedule rewrite meets: `check` says whether the analysis shows its preconditions
(an offer, or a refusal with the reason), `edits` gives byte-range edits of the user's own files and a
note saying what it did. Rewrites never guess: a precondition they cannot see is a refusal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .facts import ScheduleFacts


@dataclass(frozen=True)
class Edit:
    path: str
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Offer:
    rewrite: str
    what: str
    knobs: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Refusal:
    rewrite: str
    reason: str


@dataclass
class Rewritten:
    """What a rewrite does, apart from where it lands: edits of the region's statements, the state its new
    code keeps across iterations (declarations), what runs once before and after the region, and edits
    only the user's whole program has (its communicator's creation: the harness makes its own)."""

    edits: list[Edit]
    note: str
    members: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    teardown: list[str] = field(default_factory=list)
    program_only: list[Edit] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    definitions: list[str] = field(default_factory=list)  # file-scope code (a kernel) before the region's function


class RewriteError(ValueError):
    """A rewrite asked for where its preconditions do not hold."""


class Rewrite(Protocol):
    name: str
    summary: str

    def check(self, facts: ScheduleFacts) -> Offer | Refusal: ...

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten: ...


def apply_edits(texts: dict[str, bytes], edits: list[Edit]) -> dict[str, bytes]:
    out = dict(texts)
    by_path: dict[str, list[Edit]] = {}
    for e in edits:
        by_path.setdefault(e.path, []).append(e)
    for path, es in by_path.items():
        es.sort(key=lambda e: (e.start, e.end))
        for a, b in zip(es, es[1:]):
            if b.start < a.end:
                raise RewriteError(f"{path}: overlapping edits at bytes {a.start}-{a.end} and {b.start}-{b.end}")
        data = out[path]
        for e in reversed(es):
            data = data[: e.start] + e.text.encode() + data[e.end :]
        out[path] = data
    return out


def place(facts: ScheduleFacts, r: Rewritten) -> list[Edit]:
    """Every edit of a rewrite, placed in the facts' target: the user's program (state and set-up before
    the timer that precedes the loop, teardown after the loop) or the harness's Program (state as members,
    set-up at the end of setup(), teardown at the start of teardown())."""
    edits = list(r.edits)
    if facts.members_at is None or facts.teardown_at is None:  # the user's program (the harness's sets both)
        li = facts.loop_indent
        lines = r.members + r.setup
        if lines:
            edits.append(
                Edit(
                    facts.path,
                    facts.setup_at,
                    facts.setup_at,
                    "".join(f"{li}{x}\n" for x in "\n".join(lines).split("\n")),
                )
            )
        if r.teardown:
            at = facts.after_loop_at or facts.loop_end
            edits.append(Edit(facts.path, at, at, "".join(f"\n{li}{x}" for x in r.teardown)))
        edits += r.program_only
        for h in r.headers:
            edits += include_edit(facts, h)
        if r.definitions:
            at = facts.text.rfind(b"\n", 0, facts.function[0]) + 1
            edits.append(Edit(facts.path, at, at, "".join(d + "\n\n" for d in r.definitions)))
        return edits
    if r.program_only:
        raise RewriteError("it changes the program outside the region (the harness owns that part)")
    if r.definitions:
        at = facts.text.rfind(b"struct Program", 0, facts.members_at)
        if at < 0:
            raise RewriteError("the candidate has no `struct Program` to put the rewrite's kernel before")
        at = facts.text.rfind(b"\n", 0, at) + 1
        edits.append(Edit(facts.path, at, at, "".join(d + "\n" for d in r.definitions)))
    if r.members:
        edits.append(Edit(facts.path, facts.members_at, facts.members_at, "".join(f"  {x}\n" for x in r.members)))
    if r.setup:
        edits.append(
            Edit(
                facts.path,
                facts.setup_at,
                facts.setup_at,
                "".join(f"    {x}\n" for x in "\n".join(r.setup).split("\n")),
            )
        )
    if r.teardown:
        edits.append(Edit(facts.path, facts.teardown_at, facts.teardown_at, "".join(f"\n    {x}" for x in r.teardown)))
    return edits


def include_edit(facts: ScheduleFacts, header: str) -> list[Edit]:
    """`#include <header>` after the file's first include, unless it is there."""
    data = facts.text
    if f"<{header}>".encode() in data:
        return []
    at = data.find(b"#include")
    at = 0 if at < 0 else data.find(b"\n", at) + 1
    return [Edit(facts.path, at, at, f"#include <{header}>\n")]


def priority_stream(facts: ScheduleFacts, name: str, purpose: str, events: list[str]) -> tuple[list[str], list[str]]:
    """Set-up and teardown lines for `cuco_comm_stream`, a non-blocking stream of the device's greatest
    priority, and the (untimed) events that order it against the region's stream."""
    setup = [
        f"{{   // cuco rewrite {name}: a high-priority stream for {purpose}, events to order it",
        "    int cuco_least = 0, cuco_greatest = 0;",
        "    " + facts.wrap_cuda("cudaDeviceGetStreamPriorityRange(&cuco_least, &cuco_greatest)"),
        "    "
        + facts.wrap_cuda("cudaStreamCreateWithPriority(&cuco_comm_stream, cudaStreamNonBlocking, cuco_greatest)"),
        *("    " + facts.wrap_cuda(f"cudaEventCreateWithFlags(&{e}, cudaEventDisableTiming)") for e in events),
        "}",
    ]
    teardown = [
        *(facts.wrap_cuda(f"cudaEventDestroy({e})") for e in events),
        facts.wrap_cuda("cudaStreamDestroy(cuco_comm_stream)"),
    ]
    return setup, teardown
