"""A size sweep around the repeated region, taken apart for `cuco init`: main() loops over message sizes
(`for (size_t size = 1024; size <= max; size *= 2) { allocate; time the loop; free; }`) and each size is
a config. The workload is written from main() with the sweep's header replaced by one size
(`size_t size = 16777216;`) and its braces dropped, so the sweep's body reads as main()'s own statements:
the size becomes a config param (the hidden config scales it, and every size computed from it follows),
and the allocations, set-up and timed loop inside are what they are for any one size.

The text keeps its length and its line breaks, so every location the analysis reports stays the
program's own file:line."""

from __future__ import annotations

from dataclasses import replace

from .analyze import analyze_sources
from .evaluate import evaluate
from .model import Unresolved
from .source import SourceFile, cuda_parser

SWEEP_CONFIG_MAX = 1 << 24  # the config's size: the sweep's largest at most this (bytes or elements)
MAX_SWEEP_STEPS = 64


def flatten_sweep(prog) -> tuple[list[SourceFile], str] | None:
    """The program's sources with the size sweep holding the region flattened to one size, and the size
    chosen; None when the region sits in no such sweep of main()."""
    if (
        prog.region_node is None
        or not prog.region["at"].startswith(prog.main_src.path + ":")
        or not (prog.main.start_byte < prog.region_node.start_byte < prog.main.end_byte)
    ):
        return None
    src, body = prog.main_src, prog.main.child_by_field_name("body")
    sweep = next(
        (
            st
            for st in body.named_children
            if st.type == "for_statement"
            and st.start_byte < prog.region_node.start_byte
            and prog.region_node.end_byte <= st.end_byte
        ),
        None,
    )
    if sweep is None or not any(
        "size sweep" in a.get("what", "") and a.get("at") == src.at(sweep) for a in prog.region.get("alternatives", [])
    ):
        return None
    chosen = _chosen_size(prog, sweep)
    loop_body = sweep.child_by_field_name("body")
    init = sweep.child_by_field_name("initializer")
    if (
        chosen is None
        or loop_body is None
        or loop_body.type != "compound_statement"
        or init is None
        or init.type != "declaration"
    ):
        return None
    var_type = src.text(init.child_by_field_name("type"))
    var = chosen[0]
    head = f"{var_type} {var} = {chosen[1]};"
    span = src.data[sweep.start_byte : loop_body.start_byte + 1]
    if len(head) > len(span.replace(b"\n", b"")):
        return None
    data = bytearray(src.data)
    data[sweep.start_byte : loop_body.start_byte + 1] = _blank_keeping_lines(span, head)
    data[loop_body.end_byte - 1 : loop_body.end_byte] = b" "
    text = bytes(data)
    flat = replace(src, data=text, tree=cuda_parser().parse(text), _index=None)
    return [flat if s is src else s for s in prog.sources], f"{var} = {chosen[1]}"


def _blank_keeping_lines(span: bytes, head: str) -> bytes:
    """`head` in place of `span`, padded with spaces to its length, its line breaks kept (first)."""
    lines = span.count(b"\n")
    return b"\n" * lines + head.encode() + b" " * (len(span) - lines - len(head))


def _chosen_size(prog, sweep) -> tuple[str, int] | None:
    """(the sweep's variable, the size the config takes): the sweep's largest value at most
    SWEEP_CONFIG_MAX, from its initial value, its bound and its step (*=, <<=, +=)."""
    src = prog.main_src
    env: dict[str, int] = {}
    for v in sorted(prog.vars.values(), key=lambda v: v.pos):
        if v.top_level and v.init is not None and not v.pointer:
            value = evaluate(v.init, src, env)
            if isinstance(value, int):
                env[v.name] = value
    init = sweep.child_by_field_name("initializer")
    decl = next((d for d in init.children_by_field_name("declarator") if d.type == "init_declarator"), None)
    cond, update = sweep.child_by_field_name("condition"), sweep.child_by_field_name("update")
    if (
        decl is None
        or cond is None
        or update is None
        or cond.type != "binary_expression"
        or update.type != "assignment_expression"
    ):
        return None
    var = src.text(decl.child_by_field_name("declarator"))
    start = evaluate(decl.child_by_field_name("value"), src, env)
    bound = evaluate(cond.child_by_field_name("right"), src, env)
    step = evaluate(update.child_by_field_name("right"), src, env)
    op = src.text(update.child_by_field_name("operator"))
    if src.text(cond.child_by_field_name("left")) != var or not all(
        isinstance(x, int) and x > 0 for x in (start, bound, step)
    ):
        return None
    inclusive = src.text(cond.child_by_field_name("operator")) == "<="
    value, best = start, None
    for _ in range(MAX_SWEEP_STEPS):
        if value > bound or (value == bound and not inclusive):
            break
        if value <= SWEEP_CONFIG_MAX:
            best = value
        value = value * step if op == "*=" else value << step if op == "<<=" else value + step if op == "+=" else -1
        if value < 0:
            return None
    return (var, best) if best is not None else None


def analyze_one_size(prog, region: str | None = None, entry: str | None = None, assume: dict | None = None):
    """The program as `cuco init` writes it: with a size sweep around its region taken apart (one size,
    a config param), analysed again; the program itself otherwise. The note says which size."""
    flat = flatten_sweep(prog)
    if flat is None:
        return prog
    sources, chosen = flat
    one = analyze_sources(sources, region, entry, assume)
    one.preprocessing = prog.preprocessing
    at = next(a["at"] for a in prog.region["alternatives"] if "size sweep" in a["what"])
    one.unresolved.append(
        Unresolved(
            at,
            "a size sweep around the repeated region",
            f"the workload runs one size ({chosen}), a config param the hidden config "
            "scales; run cuco init again with another to tune for it",
        )
    )
    return one
