"""Turning a model's answer into a child source: SEARCH/REPLACE diffs, or whole EVOLVE-BLOCK rewrites.

Every failure is an `EditError` whose message is written for the model (it is fed back as the reason
its answer was rejected).
"""

from __future__ import annotations

import re

from .. import blocks

_DIFF_RE = re.compile(
    r"<{5,9} SEARCH[^\n]*\n(?P<search>.*?)\n?={5,9}[ \t]*\n(?P<replace>.*?)\n?>{5,9} REPLACE", re.DOTALL
)
_FENCE_RE = re.compile(r"```[A-Za-z0-9_+\-]*[ \t]*\n(.*?)```", re.DOTALL)


class EditError(ValueError):
    """The answer cannot be applied; the message tells the model why."""


def parse_diff(answer: str) -> list[tuple[str, str]]:
    """The (search, replace) pairs of an answer, in order."""
    pairs = [(m.group("search"), m.group("replace")) for m in _DIFF_RE.finditer(answer)]
    if not pairs:
        if "SEARCH" in answer or "REPLACE" in answer:
            raise EditError(
                "the SEARCH/REPLACE blocks are malformed: each needs a line `<<<<<<< SEARCH`, "
                "the exact old lines, a line `=======`, the new lines, and a line `>>>>>>> REPLACE`"
            )
        raise EditError("the answer holds no SEARCH/REPLACE block")
    return pairs


def _loose_find(source: str, search: str) -> tuple[int, int] | None:
    """Match ignoring trailing whitespace on each line and the common indentation; (start, end) or None."""
    want = [line.rstrip() for line in search.splitlines()]
    while want and not want[0].strip():
        want.pop(0)
    while want and not want[-1].strip():
        want.pop()
    if not want:
        return None
    lines = source.splitlines(keepends=True)
    stripped = [line.rstrip().strip() for line in lines]
    target = [w.strip() for w in want]
    hits = [i for i in range(len(lines) - len(target) + 1) if stripped[i : i + len(target)] == target]
    if len(hits) != 1:
        return None
    start = sum(len(line) for line in lines[: hits[0]])
    end = start + sum(len(line) for line in lines[hits[0] : hits[0] + len(target)])
    return start, end


def apply_diff(source: str, pairs: list[tuple[str, str]]) -> str:
    out = source
    for n, (search, replace) in enumerate(pairs, 1):
        if not search.strip():
            raise EditError(f"SEARCH block {n} is empty; it must quote existing lines exactly")
        count = out.count(search)
        if count == 1:
            out = out.replace(search, replace, 1)
            continue
        if count > 1:
            raise EditError(f"SEARCH block {n} matches {count} places; quote more lines so it matches one")
        span = _loose_find(out, search)
        if span is None:
            first = search.strip().splitlines()[0][:80]
            raise EditError(
                f"SEARCH block {n} does not match the program (it starts with {first!r}); "
                "copy the lines exactly as they are in the parent"
            )
        start, end = span
        new = replace if replace.endswith("\n") or not replace else replace + "\n"
        out = out[:start] + new + out[end:]
    return out


def parse_blocks_answer(answer: str, parent: str) -> dict[str, str]:
    """Block bodies from an answer that rewrites whole EVOLVE-BLOCKs (markers included)."""
    texts = _FENCE_RE.findall(answer) or [answer]
    bodies: dict[str, str] = {}
    for text in texts:
        if blocks.START not in text:
            continue
        try:
            found = blocks.parse_blocks(text)
        except blocks.BlockError as exc:
            raise EditError(f"the EVOLVE-BLOCK markers in the answer are broken: {exc}") from None
        for b in found:
            bodies[b.name] = b.body
    if not bodies:
        raise EditError(
            f"the answer holds no block: write each block you change between "
            f"`// {blocks.START} NAME` and `// {blocks.END}` lines inside a code fence"
        )
    names = [b.name for b in blocks.parse_blocks(parent)]
    unknown = [n for n in bodies if n not in names]
    if unknown:
        raise EditError(f"the answer names blocks {unknown} that the program does not have (it has {names})")
    return bodies


def apply_blocks_answer(parent: str, answer: str) -> str:
    return blocks.replace_blocks(parent, parse_blocks_answer(answer, parent))


def check_child(parent: str, child: str) -> None:
    """The EVOLVE-BLOCK rules, plus: the child must differ from its parent."""
    try:
        blocks.validate_child(parent, child)
    except blocks.BlockError as exc:
        raise EditError(str(exc)) from None
    if child == parent:
        raise EditError("the edit changes nothing")
