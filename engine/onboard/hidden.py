"""Collectives the analysis cannot follow are errors, never guesses (exit 2 with file:line)."""

from __future__ import annotations

from remote.errors import InputError

from . import api
from .source import call_name, parse_text, walk

WHAT_TO_DO = ("call the NCCL function directly from main() (that is the annotation the analysis needs), then run "
              "the command again; or write the workload by hand (docs/workload-format.md)")


def is_kernel(src, fn) -> bool:
    return any(c.type in ("storage_class_specifier", "attribute_specifier", "ms_declspec_modifier",
                          "type_qualifier") and src.text(c) == "__global__" for c in fn.children) \
        or src.text(fn).lstrip().startswith("__global__")


def has_comm_call(src, fn) -> bool:
    return any(call_name(n, src) in api.NCCL_COMM for n in src.nodes("call_expression", fn))


def check_no_hidden_collectives(sources, functions, macros) -> None:
    """Collectives the analysis cannot follow are errors, never guesses: an NCCL function used as a value
    (a function pointer: dynamic dispatch), inside a macro's body, or inside a helper function."""
    for src in sources:
        for n in src.nodes("identifier"):
            name = src.text(n)
            if name not in api.NCCL_COMM:
                continue
            parent = n.parent
            if parent is not None and parent.type == "call_expression" and parent.child_by_field_name("function") == n:
                continue
            raise InputError(src.at(n), name,
                             f"{name} is used as a value (a function pointer or table entry): the collective is "
                             f"chosen by dynamic dispatch and the analysis cannot tell which call runs; "
                             f"{WHAT_TO_DO}")
    for name, (src, node) in macros.items():
        value = node.child_by_field_name("value")
        if value is None:
            continue
        body = parse_text(src.text(value))
        hidden = [n for n in walk(body.tree.root_node) if n.type == "identifier" and body.text(n) in api.NCCL_COMM]
        if hidden:
            raise InputError(src.at(node), name,
                             f"the macro {name} hides {body.text(hidden[0])} in its body: the parser sees the "
                             f"macro's uses, not the collective; {WHAT_TO_DO}")
