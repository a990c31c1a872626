"""Which buffers a kernel reads and writes, from its parameters and body."""

from __future__ import annotations

from .source import SourceFile, declarator_name, function_declarator, identifiers


def kernel_access(src: SourceFile, fn) -> list[str]:
    """Per parameter of a kernel: "r" (read), "w" (written), "rw", or "" for non-pointers. A const pointer
    is read; a pointer is written when an assignment's left side indexes or dereferences it, and read when
    it appears anywhere else (or passed on to another function: both, to be safe)."""
    decl = function_declarator(fn)
    params = decl.child_by_field_name("parameters").named_children if decl is not None else []
    body = fn.child_by_field_name("body")
    out = []
    for p in params:
        if p.type != "parameter_declaration":
            out.append("")
            continue
        d = p.child_by_field_name("declarator")
        name = declarator_name(d, src) if d is not None else None
        is_ptr = d is not None and (d.type == "pointer_declarator" or d.type == "array_declarator")
        const = any(c.type == "type_qualifier" and src.text(c) == "const" for c in p.children)
        if not is_ptr or name is None:
            out.append("")
            continue
        if const:
            out.append("r")
            continue
        reads = writes = False
        for n in identifiers(body):
            if src.text(n) != name:
                continue
            lhs = assignment_target(n)
            if lhs == "=":
                writes = True
            elif lhs == "op=":
                writes = reads = True
            elif n.parent.type == "argument_list":
                writes = reads = True
            else:
                reads = True
        out.append(("r" if reads else "") + ("w" if writes else ""))
    return out


def assignment_target(ident) -> str | None:
    """Whether an identifier is the base of an assignment's left side (`p[i] = ...`, `*p = ...`)."""
    n = ident
    while (
        n.parent is not None
        and n.parent.type
        in (
            "subscript_expression",
            "pointer_expression",
            "parenthesized_expression",
            "field_expression",
            "subscript_argument_list",
        )
        and n.parent.child_by_field_name("indices") != n
    ):
        if n.parent.type == "subscript_expression" and n.parent.child_by_field_name("argument") != n:
            return None
        n = n.parent
    p = n.parent
    if p is not None and p.type == "assignment_expression" and p.child_by_field_name("left") == n and n is not ident:
        op = p.child_by_field_name("operator")
        return "=" if op is not None and op.type == "=" else "op="
    if p is not None and p.type == "update_expression" and n is not ident:
        return "op="
    return None
