"""EVOLVE-BLOCK handling: find the mutable regions, check an edit stayed inside them, swap blocks in.

Also the two in-block annotations: `// cuco:design k=v ...` (a candidate's design point) and
`// cuco:knob NAME` (a value the design-space mutator may rewrite).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

START = "EVOLVE-BLOCK-START"
END = "EVOLVE-BLOCK-END"
START_RE = re.compile(r"^\s*(?://|#|/\*)?\s*EVOLVE-BLOCK-START\b[ \t]*([A-Za-z0-9_.-]*)")
END_RE = re.compile(r"^\s*(?://|#|/\*)?\s*EVOLVE-BLOCK-END\b")
_DESIGN_RE = re.compile(r"//\s*cuco:design\s+(.*)$")
_KNOB_RE = re.compile(r"=\s*([^;=]+?)\s*;\s*//\s*cuco:knob\s+([A-Za-z0-9_]+)")


class BlockError(ValueError):
    """An edit or a source that breaks the EVOLVE-BLOCK rules; the message says which rule."""


@dataclass(frozen=True)
class Block:
    name: str
    start: int  # index of the START marker line
    end: int  # index of the END marker line
    body: str  # the lines strictly between the markers, newline-terminated


def parse_blocks(source: str) -> list[Block]:
    return list(_parse_blocks_cached(source))


@functools.lru_cache(maxsize=512)
def _parse_blocks_cached(source: str) -> tuple[Block, ...]:
    """Sources are immutable strings and the engine parses the same few parents again and again."""
    lines = source.splitlines(keepends=True)
    blocks: list[Block] = []
    open_at: int | None = None
    open_name = ""
    for i, line in enumerate(lines):
        if "EVOLVE-BLOCK" not in line:
            continue
        m = START_RE.match(line)
        if m:
            if open_at is not None:
                raise BlockError(
                    f"line {i + 1}: {START} inside the block opened at line {open_at + 1} (blocks do not nest)"
                )
            open_at, open_name = i, m.group(1) or str(len(blocks))
            continue
        if END_RE.match(line):
            if open_at is None:
                raise BlockError(f"line {i + 1}: {END} without a {START}")
            blocks.append(Block(open_name, open_at, i, "".join(lines[open_at + 1 : i])))
            open_at = None
    if open_at is not None:
        raise BlockError(f"line {open_at + 1}: {START} is never closed with {END}")
    names = [b.name for b in blocks]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise BlockError(f"block names must be unique; repeated: {', '.join(sorted(dup))}")
    return tuple(blocks)


_TOKEN_RE = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|/\*|["']""", re.S)


def strip_comments(text: str) -> tuple[str, str | None]:
    """The text with comments blanked out (strings kept), and what is left open at its end, if
    anything ('comment', 'string'): a block must not open a comment that a later block closes."""
    left_open: list[str] = []

    def token(m: re.Match) -> str:
        t = m.group(0)
        if t == "/*":
            left_open.append("comment")
            return ""
        if t in ("'", '"'):
            left_open.append("string")
            return t
        if t.startswith("/"):
            return " " + "\n" * t.count("\n")  # keep line numbers
        return t

    out = _TOKEN_RE.sub(token, text)
    return out, (left_open[0] if left_open else None)


_DIRECTIVE_RE = re.compile(r"^\s*(#|%:|\?\?=)")


def check_block_bodies(source: str) -> None:
    """Reject preprocessor directives inside blocks (a `#define` there could rewrite frozen code),
    however they are spelled: behind a comment, as the `%:` digraph, or as `_Pragma`."""
    for block in parse_blocks(source):
        code, open_at_end = strip_comments(block.body)
        if open_at_end:
            raise BlockError(f"EVOLVE-BLOCK '{block.name}' ends inside an unterminated {open_at_end}")
        for k, line in enumerate(code.splitlines()):
            if _DIRECTIVE_RE.match(line) or "_Pragma" in line:
                raise BlockError(
                    f"line {block.start + 2 + k}: preprocessor line inside EVOLVE-BLOCK "
                    f"'{block.name}' is not allowed: {block.body.splitlines()[k].strip()[:60]}"
                )


def frozen_skeleton(source: str) -> list[str]:
    """The text outside the blocks, with one placeholder per block: two sources with the same
    skeleton differ only inside their blocks."""
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for block in parse_blocks(source):
        out.extend(lines[pos : block.start + 1])
        out.append(f"\0BLOCK {block.name}\0")
        pos = block.end
    out.extend(lines[pos:])
    return [line.rstrip() for line in out]


def validate_child(parent: str, child: str) -> None:
    """A child is valid when it changed nothing outside the parent's blocks and its blocks are clean."""
    try:
        child_blocks = parse_blocks(child)
    except BlockError as exc:
        raise BlockError(f"the child's EVOLVE-BLOCK markers are broken: {exc}") from None
    parent_names = [b.name for b in parse_blocks(parent)]
    if [b.name for b in child_blocks] != parent_names:
        raise BlockError(f"the child must keep the blocks {parent_names}; it has {[b.name for b in child_blocks]}")
    if frozen_skeleton(parent) != frozen_skeleton(child):
        raise BlockError("the child changed code outside the EVOLVE-BLOCKs")
    check_block_bodies(child)


def replace_blocks(source: str, bodies: dict[str, str]) -> str:
    """Return `source` with the named blocks' bodies replaced."""
    blocks = parse_blocks(source)
    known = {b.name for b in blocks}
    unknown = set(bodies) - known
    if unknown:
        raise BlockError(f"no block named {', '.join(sorted(unknown))} (blocks: {', '.join(sorted(known))})")
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for block in blocks:
        out.extend(lines[pos : block.start + 1])
        if block.name in bodies:
            body = bodies[block.name]
            out.append(body if body.endswith("\n") or not body else body + "\n")
        else:
            out.append(block.body)
        pos = block.end
    out.extend(lines[pos:])
    return "".join(out)


def block_bodies(source: str) -> dict[str, str]:
    return {b.name: b.body for b in parse_blocks(source)}


def design_annotations(source: str) -> dict[str, str]:
    """`// cuco:design k=v` pairs found inside blocks (later lines win)."""
    point: dict[str, str] = {}
    for block in parse_blocks(source):
        for line in block.body.splitlines():
            if "cuco:design" not in line:
                continue
            m = _DESIGN_RE.search(line)
            if m:
                for item in m.group(1).split():
                    if "=" in item:
                        k, v = item.split("=", 1)
                        point[k.strip()] = v.strip()
    return point


def knob_values(source: str) -> dict[str, str]:
    return dict(_knob_items(source))


@functools.lru_cache(maxsize=256)  # the search steps from the same few parents again and again
def _knob_items(source: str) -> tuple[tuple[str, str], ...]:
    values: dict[str, str] = {}
    for block in parse_blocks(source):
        for line in block.body.splitlines():
            if "cuco:knob" not in line:
                continue
            m = _KNOB_RE.search(line)
            if m:
                values[m.group(2)] = m.group(1).strip()
    return tuple(values.items())


@functools.lru_cache(maxsize=64)
def _knob_pattern(knob: str) -> re.Pattern:
    return re.compile(r"(=\s*)([^;=\n]+?)(\s*;\s*//\s*cuco:knob\s+" + re.escape(knob) + r"\b)")


@functools.lru_cache(maxsize=4096)
def set_knob(source: str, knob: str, value: str) -> str:
    """Rewrite every `= X; // cuco:knob knob` inside blocks to `= value;` (memoized: the search keeps
    stepping from the same few good parents)."""
    pattern = _knob_pattern(knob)
    spans = [(b.start, b.end) for b in parse_blocks(source)]

    def inside(pos: int) -> bool:
        line = source.count("\n", 0, pos)
        return any(start < line < end for start, end in spans)

    found = False

    def sub(m: re.Match) -> str:
        nonlocal found
        if not inside(m.start()):
            return m.group(0)
        found = True
        return m.group(1) + value + m.group(3)

    out = pattern.sub(sub, source)
    if not found:
        raise BlockError(f"no `// cuco:knob {knob}` line inside an EVOLVE-BLOCK")
    return out


def set_design(source: str, point: dict[str, str]) -> str:
    """Rewrite the `// cuco:design` line of the first block that has one (or add one to block 0)."""
    blocks = parse_blocks(source)
    if not blocks:
        raise BlockError("the source has no EVOLVE-BLOCK")
    text = " ".join(f"{k}={v}" for k, v in point.items())
    for block in blocks:
        lines = block.body.splitlines(keepends=True)
        for i, line in enumerate(lines):
            m = _DESIGN_RE.search(line)
            if m:
                lines[i] = line[: m.start()] + f"// cuco:design {text}" + ("\n" if line.endswith("\n") else "")
                return replace_blocks(source, {block.name: "".join(lines)})
    first = blocks[0]
    return replace_blocks(source, {first.name: f"// cuco:design {text}\n" + first.body})
