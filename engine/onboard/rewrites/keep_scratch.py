"""Scratch kept across calls: a helper function the region calls that allocates a local buffer with
`cudaMalloc` and frees it before it returns (the ring all-reduce's `scratch_buff`) pays an allocation
and a free, which waits for the device, on every iteration. The allocation becomes a function-local
cache that grows when a call needs more bytes and is otherwise reused; the free goes.

Preconditions: a function of the program that a statement of the region calls directly holds exactly one
`cudaMalloc(&X, bytes)` and one `cudaFree(X)` of a pointer X declared in its body, both statements of the
function's own block (not under a condition or a loop), the free after the allocation, and X assigned
nowhere else. The cache is never freed: it lives as long as the process (noted)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..source import cuda_parser, walk
from .base import Edit, Offer, Refusal, RewriteError, Rewritten
from .facts import ScheduleFacts, calls_in, source_text

if TYPE_CHECKING:
    from tree_sitter import Node

NAME = "keep_scratch"


def _functions(data: bytes) -> dict[str, Node]:
    out = {}
    for fn in walk(cuda_parser().parse(data).root_node):
        if fn.type != "function_definition" or fn.child_by_field_name("body") is None:
            continue
        decl = fn.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        if decl is not None and decl.child_by_field_name("declarator") is not None:
            out[source_text(data, decl.child_by_field_name("declarator")).split("::")[-1]] = fn
    return out


def _statement_of(node, body):
    """The expression statement of `body`'s own block that holds `node`, or None when it sits deeper (under
    a condition, in a loop)."""
    n = node
    while n.parent is not None and n.parent != body:
        n = n.parent
    return n if n.parent == body and n.type == "expression_statement" else None


def plan(facts: ScheduleFacts) -> list[dict] | str:
    called = {c.name for s in facts.stmts for c in s.calls}
    found, reasons = [], []
    for path, data in facts.texts.items():
        for name, fn in _functions(data).items():
            if name not in called:
                continue
            body = fn.child_by_field_name("body")
            calls = calls_in(data, body)
            params = source_text(data, fn.child_by_field_name("declarator"))
            for m in [c for c in calls if c.name == "cudaMalloc" and len(c.args) == 2]:
                target = re.sub(r"\s|\(void\s*\*\*\)", "", m.args[0].text)
                if not re.fullmatch(r"&[A-Za-z_]\w*", target):
                    continue
                x = target[1:]
                where = f"{path}:{m.line}"
                if re.search(rf"\b{x}\b", params):
                    reasons.append(f"{where}: {x} is a parameter of {name}()")
                    continue
                text = source_text(data, body)
                if not re.search(rf"[\s*]{x}\s*;", text):
                    reasons.append(f"{where}: {x} is not declared in {name}()'s body")
                    continue
                mallocs = [
                    c
                    for c in calls
                    if c.name == "cudaMalloc"
                    and c.args
                    and re.sub(r"\s|\(void\s*\*\*\)", "", c.args[0].text) == f"&{x}"
                ]
                frees = [c for c in calls if c.name == "cudaFree" and c.args and c.args[0].text.strip() == x]
                if len(mallocs) != 1 or len(frees) != 1:
                    reasons.append(
                        f"{where}: {x} is allocated {len(mallocs)} and freed {len(frees)} time(s) in {name}()"
                    )
                    continue
                if re.search(rf"\b{x}\s*=[^=]", text):
                    reasons.append(f"{where}: {x} is assigned in {name}()")
                    continue
                nodes = {n.start_byte: n for n in walk(body) if n.type == "call_expression"}
                ms, fs = (_statement_of(nodes[c.start], body) for c in (m, frees[0]))
                if ms is None or fs is None:
                    reasons.append(f"{where}: the allocation or the free of {x} is under a condition or a loop")
                    continue
                if fs.start_byte < ms.end_byte:
                    reasons.append(f"{where}: {x} is freed before it is allocated")
                    continue
                wrap = next(
                    (c.name for c in calls if len(c.args) == 1 and c.start <= m.start < c.end and c.name != m.name),
                    None,
                )
                found.append(
                    dict(
                        path=path,
                        function=name,
                        var=x,
                        bytes=m.args[1].text.strip(),
                        wrap=wrap,
                        malloc=(ms.start_byte, ms.end_byte),
                        free=(fs.start_byte, fs.end_byte),
                        line=m.line,
                        free_line=frees[0].line,
                    )
                )
    if not found:
        return (
            reasons[0]
            if reasons
            else (
                "no function the region calls allocates and frees a scratch buffer of "
                "its own (cudaMalloc ... cudaFree in its body)"
            )
        )
    return found


class KeepScratch:
    name = NAME
    summary = "keep a helper's per-call scratch allocation across calls (no cudaMalloc/cudaFree per iteration)"

    def check(self, facts: ScheduleFacts) -> Offer | Refusal:
        p = plan(facts)
        if isinstance(p, str):
            return Refusal(NAME, p)
        return Offer(NAME, ", ".join(f"{x['var']} of {x['function']}() ({x['path']}:{x['line']})" for x in p))

    def rewrite(self, facts: ScheduleFacts, knobs: dict[str, str]) -> Rewritten:
        p = plan(facts)
        if isinstance(p, str):
            raise RewriteError(f"{NAME}: {p}")
        edits = []
        for x in p:
            v, keep, have = x["var"], f"cuco_keep_{x['var']}", f"cuco_keep_{x['var']}_bytes"

            def w(call: str, wrap: str | None = x["wrap"]) -> str:
                return f"{wrap}({call});" if wrap else f"{call};"

            data = facts.texts[x["path"]]
            start, end = x["malloc"]
            line_start = data.rfind(b"\n", 0, start) + 1
            ind = data[line_start:start].decode()
            ind = "" if ind.strip() else ind
            lines = [
                f"// cuco rewrite {NAME}: {v} kept across calls, allocated again only when a call needs more",
                f"static void* {keep} = nullptr;",
                f"static size_t {have} = 0;",
                f"if ((size_t)({x['bytes']}) > {have}) {{",
                f"    if ({keep} != nullptr) " + w(f"cudaFree({keep})"),
                "    " + w(f"cudaMalloc(&{keep}, {x['bytes']})"),
                f"    {have} = (size_t)({x['bytes']});",
                "}",
                f"{v} = (decltype({v})){keep};",
            ]
            edits.append(Edit(x["path"], start, end, f"\n{ind}".join(lines)))
            fstart, fend = x["free"]
            edits.append(Edit(x["path"], fstart, fend, f"// cuco rewrite {NAME}: {v} is kept for the next call"))
        note = "; ".join(
            f"{NAME}: {x['var']} of {x['function']}() ({x['path']}:{x['line']}) allocated once and kept "
            f"across calls (again only when a call needs more bytes), its cudaFree "
            f"({x['path']}:{x['free_line']}) removed; the buffer lives as long as the process"
            for x in p
        )
        return Rewritten(edits, note)
