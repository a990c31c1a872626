"""Collectives the analysis cannot follow are errors, never guesses (exit 2 with file:line)."""

from __future__ import annotations

from remote.errors import InputError

from . import api
from .source import call_name, parse_text, walk

WHAT_TO_DO = (
    "call the NCCL function directly from main() (that is the annotation the analysis needs), then run "
    "the command again; or write the workload by hand (docs/workload-format.md)"
)


def is_kernel(src, fn) -> bool:
    return any(
        c.type in ("storage_class_specifier", "attribute_specifier", "ms_declspec_modifier", "type_qualifier")
        and src.text(c) == "__global__"
        for c in fn.children
    ) or src.text(fn).lstrip().startswith("__global__")


def has_comm_call(src, fn) -> bool:
    return any(call_name(n, src) in api.NCCL_COMM for n in src.nodes("call_expression", fn))


def dispatch_targets(sources) -> tuple[list[str], set[str], str | None]:
    """NCCL functions used as values (function pointers, table entries): their names, the variables that
    hold them (`reduce_fn fn = ncclAllReduce;`, `fn_t table[] = {ncclAllReduce, ncclAllGather};`), and the
    first place, file:line."""
    targets, holders, first = [], set(), None
    for src in sources:
        for n in src.nodes("identifier"):
            name = src.text(n)
            if name not in api.NCCL_COMM:
                continue
            parent = n.parent
            if parent is not None and parent.type == "call_expression" and parent.child_by_field_name("function") == n:
                continue
            if name not in targets:
                targets.append(name)
            first = first or src.at(n)
            holder = parent
            while holder is not None and holder.type not in ("init_declarator", "assignment_expression"):
                holder = holder.parent
            if holder is not None:
                side = holder.child_by_field_name("declarator" if holder.type == "init_declarator" else "left")
                ids = [src.text(i) for i in walk(side) if i.type == "identifier"] if side is not None else []
                holders.update(ids[:1])
    return targets, holders, first


def check_no_hidden_collectives(sources, functions, macros, entry: str | None = None) -> None:
    """Collectives the analysis cannot follow are errors, never guesses: an NCCL function used as a value
    (a function pointer: dynamic dispatch; `--entry NAME` names the one to analyse), or inside a macro's
    body."""
    targets, _, first = dispatch_targets(sources)
    if first is not None and entry is None:  # first: where the first target is used
        raise InputError(
            first,
            targets[0],
            f"{targets[0]} is used as a value (a function pointer or table entry; the targets: "
            f"{', '.join(targets)}): the collective is chosen by dynamic dispatch and the analysis "
            f"cannot tell which call runs; pass --entry NAME (one of the targets) to analyse the "
            f"program as if it called that one, or {WHAT_TO_DO}",
        )
    if entry is not None and entry not in targets and entry not in functions:
        raise InputError(
            "--entry",
            entry,
            f"not a target of a function-pointer table in the program, nor one of its functions "
            f"({', '.join(targets) or 'no NCCL function is used as a value'})",
        )
    for name, (src, node) in macros.items():
        value = node.child_by_field_name("value")
        if value is None:
            continue
        body = parse_text(src.text(value))
        hidden = [n for n in walk(body.tree.root_node) if n.type == "identifier" and body.text(n) in api.NCCL_COMM]
        if hidden:
            raise InputError(
                src.at(node),
                name,
                f"the macro {name} hides {body.text(hidden[0])} in its body: the parser sees the "
                f"macro's uses, not the collective; {WHAT_TO_DO}",
            )
