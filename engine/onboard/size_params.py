"""The size parameters of a program: the top-level variables of main() with an integer default (a literal,
or what its command line gives when empty) that the region's buffer sizes and collective counts come from."""

from __future__ import annotations

from typing import Any

from .command_line import ENV_CALLS, default_of, reads_command_line
from .communicators import MainScope, calls_any
from .evaluate import evaluate
from .model import Buffer, Op, Var
from .node_text import text_or_none
from .region_choice import Region
from .source import SourceFile, identifiers, names_in, walk


def size_params(buffers: dict[str, Buffer], ops: list[Op], region: Region, main: MainScope) -> list[dict]:
    """Each parameter (name, type, default, where; `from: command line` where the program reads it), in
    declaration order."""
    vars_, main_src, functions = main.vars, main.src, main.functions
    exprs: list[str | None] = [b.size for b in buffers.values() if b.role != "unused"]
    exprs += [op.detail.get("count") for op in ops if op.in_region and op.kind in ("collective", "p2p")]
    roots = _roots(exprs, region, main)
    params = []
    for name in sorted(set(roots), key=lambda n: vars_[n].pos):
        var = vars_[name]
        default = _default(var, main_src, functions)
        param: dict[str, Any] = {
            "name": name,
            "type": var.type,
            "default": default,
            "at": f"{main_src.path}:{var.line}",
        }
        if evaluate(var.init, main_src, {}) is None:  # the program's default when its command line is empty
            param["from"] = "command line"
        params.append(param)
    return params


def _roots(exprs: list[str | None], region: Region, main: MainScope) -> list[str]:
    """The variables with an integer default the expressions depend on, through initialisers and the
    assignments before the region."""
    vars_, main_src, functions = main.vars, main.src, main.functions
    roots: list[str] = []
    seen: set[str] = set()
    todo = [i for e in exprs if e for i in names_in(e)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        var = vars_.get(name)
        if var is not None and var.top_level and var.init is None:  # `T v; if (c) v = a; else v = b;`
            todo.extend(
                i.text.decode()
                for st in _assigning_statements(name, main_src, main.body, region)
                for i in identifiers(st)
                if i.text.decode() != name
            )
            continue
        if var is None or not var.top_level or var.init is None:
            continue
        value = _default(var, main_src, functions)
        if value is not None and isinstance(value, int) and not var.pointer:
            roots.append(name)
            continue
        todo.extend(main_src.text(i) for i in identifiers(var.init))
    return roots


def _assigning_statements(name: str, main_src: SourceFile, main_body, region: Region) -> list:
    """main()'s top-level statements before the region that assign `name` (no calls in them)."""
    out = []
    for st in main_body.named_children:
        in_main_region = region.node is not None and region.src is main_src
        if in_main_region and st.start_byte >= region.node.start_byte:
            break
        if st.type not in ("expression_statement", "if_statement"):
            continue
        targets = {text_or_none(a.child_by_field_name("left")) for a in walk(st) if a.type == "assignment_expression"}
        if name in targets and not any(n.type == "call_expression" for n in walk(st)):
            out.append(st)
    return out


def _default(var: Var, main_src: SourceFile, functions: dict):
    value = evaluate(var.init, main_src, {})
    if value is None and reads_command_line(var.init, main_src, lambda n: calls_any(functions, n, ENV_CALLS)):
        value = default_of(var.init, main_src)
    return value
