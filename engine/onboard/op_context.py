"""What decides whether and how often an operation of the repeated region runs: the conditions around it
(`if (calculate_norm)`: a run-time flag, an alternative, never both branches as one sequence), the loops
around it inside the region (helpers' loops included), and the `--assume NAME=VALUE` that rule a branch out."""

from __future__ import annotations

from typing import Any

from .evaluate import evaluate_text
from .loops import LOOPS, inside, iterations
from .model import Op
from .node_text import text_or_none
from .region_choice import Region


def record_context(op: Op, region: Region) -> None:
    """The conditions (`when`) and loops (`loops`) around an op of the region, outermost first."""
    when: list[str] = []
    loops: list[dict[str, Any]] = []
    level = next((k for k, (s, n) in enumerate(op.chain) if s is region.src and inside(n, region.node)), 0)
    for k in range(level, len(op.chain)):
        for kind, what in reversed(_around(op.chain[k], region.node if k == level else None)):
            (when if kind == "when" else loops).append(what)
    if when:
        op.detail["when"] = when
    if loops:
        op.detail["loops"] = loops


def _around(link: tuple, region_node: Any) -> list[tuple[str, Any]]:
    """The conditions and loops around one call of an op's chain, innermost first, up to its function (or
    to the region, at the call the region holds)."""
    src, n = link
    node = n.parent
    inner: list[tuple[str, Any]] = []
    while node is not None and node.type != "function_definition":
        if region_node is not None and inside(region_node, node):
            break
        if node.type == "if_statement":
            cond = node.child_by_field_name("condition")
            alt = node.child_by_field_name("alternative")
            negate = alt is not None and inside(n, alt)
            inner.append(("when", f"{'!' if negate else ''}{text_or_none(cond)}"))
        elif node.type in LOOPS:
            loop = {"at": src.at(node), "kind": node.type.replace("_statement", ""), "iterations": iterations(node)}
            inner.append(("loop", loop))
        node = node.parent
    return inner


def apply_assumptions(op: Op, assume: dict[str, int]) -> None:
    """--assume NAME=VALUE: a run-time flag's branch is an alternative. An operation whose condition is
    false under the assumptions is not part of the region's sequence (kept, marked `assumed_out`)."""
    if not assume or not op.detail.get("when"):
        return
    for cond in op.detail["when"]:
        negate = cond.startswith("!")
        value = evaluate_text(cond[1:] if negate else cond, assume)
        if value is not None and bool(value) == negate:
            op.in_region = False
            op.detail["assumed_out"] = f"{cond} is false with " + ", ".join(f"{k}={v}" for k, v in assume.items())
            return
