"""What the analysis asks of a loop or a timed section: whether a node lies inside another, whether an
operation runs inside it, whether a timer reads just around it, its loop variable and iteration count."""

from __future__ import annotations

from typing import Any

from .model import Op
from .node_text import node_text, text_or_none
from .source import SourceFile, call_name, declarator_name

LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
TIMERS = {"cudaEventRecord", "MPI_Wtime", "clock_gettime", "gettimeofday", "omp_get_wtime", "clock"}


class Section:
    """Statements of one block between two timer statements (or a capture's begin and end): the region of
    a program that times straight-line code, standing where a loop node stands."""

    type = "section"

    def __init__(self, stmts: list):
        self.children = self.named_children = stmts
        self.start_byte, self.end_byte = stmts[0].start_byte, stmts[-1].end_byte
        self.start_point, self.end_point = stmts[0].start_point, stmts[-1].end_point
        self.parent = stmts[0].parent
        self.prev_named_sibling = stmts[0].prev_named_sibling
        self.next_named_sibling = stmts[-1].next_named_sibling

    def child_by_field_name(self, name):
        return self if name == "body" else None


def inside(node, outer) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def op_in(op: Op, src: SourceFile, node: Any) -> bool:
    """Whether an operation runs inside `node` (a loop or section of `src`): the node holds the op's
    call or one of the calls that lead to it."""
    return any(s is src and inside(n, node) for s, n in op.chain)


def loop_calls(src: SourceFile, loop: Any, names) -> bool:
    return any(call_name(n, src) in names for n in src.nodes("call_expression", loop))


def loop_var(src: SourceFile, loop: Any) -> str | None:
    if loop.type != "for_statement":
        return None
    init = loop.child_by_field_name("initializer")
    if init is None:
        return None
    if init.type == "assignment_expression":
        return text_or_none(init.child_by_field_name("left"))
    return next((declarator_name(d, src) for d in init.children_by_field_name("declarator")), None)


def iterations(loop: Any) -> str | None:
    cond = loop.child_by_field_name("condition")
    if loop.type == "for_statement" and cond is not None and cond.type == "binary_expression":
        return text_or_none(cond.child_by_field_name("right"))
    return text_or_none(cond) if cond is not None else None


def is_timer(src: SourceFile, call: Any) -> bool:
    name = call_name(call, src)
    return name in TIMERS or (name == "now" and "chrono" in node_text(call))


def timed(src: SourceFile, loop: Any) -> bool:
    """A timer read in one of the few statements just before the loop, or just after it when no other
    loop follows that timer (then it starts that loop's timing: this one is its warm-up)."""
    if isinstance(loop, Section):
        return True
    for step in ("prev_named_sibling", "next_named_sibling"):
        n, seen, found = getattr(loop, step), 0, False
        while n is not None and seen < 3:
            if n.type != "comment":
                seen += 1
                if n.type in LOOPS:
                    found = found and step == "prev_named_sibling"
                    break
                if any(is_timer(src, c) for c in src.nodes("call_expression", n)) or (
                    n.type == "call_expression" and is_timer(src, n)
                ):
                    found = True
            n = getattr(n, step)
        if found:
            return True
    return False
