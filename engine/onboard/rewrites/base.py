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


class RewriteError(ValueError):
    """A rewrite asked for where its preconditions do not hold."""


class Rewrite(Protocol):
    name: str
    summary: str

    def check(self, facts: ScheduleFacts) -> Offer | Refusal: ...

    def edits(self, facts: ScheduleFacts, knobs: dict[str, str]) -> tuple[list[Edit], str]: ...


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
            data = data[:e.start] + e.text.encode() + data[e.end:]
        out[path] = data
    return out


def shifted(offset: int, path: str, edits: list[Edit]) -> int:
    """Where `offset` of `path` lands once the edits are applied (edits at or before it move it)."""
    delta = 0
    for e in edits:
        if e.path == path and e.end <= offset:
            delta += len(e.text.encode()) - (e.end - e.start)
    return offset + delta


def include_edit(facts: ScheduleFacts, header: str) -> list[Edit]:
    """`#include <header>` after the file's first include, unless it is there."""
    data = facts.text
    if f"<{header}>".encode() in data:
        return []
    at = data.find(b"#include")
    at = 0 if at < 0 else data.find(b"\n", at) + 1
    return [Edit(facts.path, at, at, f"#include <{header}>\n")]
