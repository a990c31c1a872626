"""The variables of main() and of the helpers the analysis follows, and what each pointer is based on
(`float* p = base + off`, a helper's pointer parameter bound to the caller's buffer): the buffer a pointer
expression names."""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import Var
from .node_text import text_or_none
from .source import SourceFile, declarator_name, identifiers
from .wrappers import param_names


@dataclass
class Pointers:
    """The program's variables and its pointer aliases (pointer name -> the pointer it is based on)."""

    vars: dict[str, Var]
    alias: dict[str, str] = field(default_factory=dict)

    def base_name(self, node) -> str | None:
        """The variable a pointer expression is based on: `x`, `&x`, `(void**)&x`, `x + off`, `(char*)x`."""
        if node is None:
            return None
        for i in identifiers(node):
            name = self.unalias(i.text.decode())
            if name in self.vars and (self.vars[name].pointer or i.parent.type == "pointer_expression"):
                return name
        return None

    def unalias(self, name: str) -> str:
        seen = set()
        while name in self.alias and name not in seen:
            seen.add(name)
            name = self.alias[name]
        return name

    def bind(self, params: list[str], pointers: set[str], args: list) -> None:
        """A followed call's pointer parameters stand for the caller's buffers they are passed."""
        for p, a in zip(params, args):
            base = self.base_name(a)
            if p in pointers and base is not None and base != p:
                self.alias[p] = base


def collect_variables(bodies: list, main_src: SourceFile, main_body, functions: dict, helpers: set[str]) -> Pointers:
    """Every variable declared in the bodies (main's first: its own variable of a name wins), and the
    aliases their initialisers make."""
    vars_: dict[str, Var] = {}
    for src, body in bodies:
        _collect_in(vars_, src, body, main=src is main_src and body is main_body)
    pointers = {n for n, v in vars_.items() if v.pointer}
    for name, (src, fn) in functions.items():
        if name in helpers:
            pointers |= param_names(src, fn)[1]
    out = Pointers(vars_)
    for name, v in vars_.items():  # `float* p = base + off`, `p = c ? a : b`: aliases
        if v.pointer and v.init is not None:
            base = next(
                (
                    i.text.decode()
                    for i in identifiers(v.init)
                    if i.text.decode() != name and i.text.decode() in pointers
                ),
                None,
            )
            if base is not None:
                out.alias[name] = base
    return out


def _collect_in(vars_: dict[str, Var], src: SourceFile, body, main: bool) -> None:
    top = {(c.start_byte, c.end_byte) for c in body.named_children}
    for decl in src.nodes("declaration", body):
        type_node = decl.child_by_field_name("type")
        if type_node is None:
            continue
        base = src.text(type_node)
        for d in decl.children_by_field_name("declarator"):
            name = declarator_name(d, src)
            if not name:
                continue
            if not main and name in vars_:
                continue  # main's own variable of that name comes first
            vars_[name] = _var(src, decl, d, name, base, main and (decl.start_byte, decl.end_byte) in top)


def _var(src: SourceFile, decl, d, name: str, base: str, top_level: bool) -> Var:
    inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
    value = d.child_by_field_name("value") if d.type == "init_declarator" else None
    pointer = inner is not None and inner.type == "pointer_declarator"
    array = None
    if inner is not None and inner.type == "array_declarator":
        size = inner.child_by_field_name("size")
        array = src.text(size) if size is not None else ""
    ctor = None
    if inner is not None and inner.type == "function_declarator":  # `T v(n);` (vexing parse)
        params = inner.child_by_field_name("parameters")
        ctor = src.text(params)[1:-1]
    return Var(
        name,
        base + ("*" if pointer else ""),
        base,
        pointer,
        array,
        value,
        decl,
        src.line(decl),
        top_level,
        ctor,
        d.start_byte,
    )


def integer_constants(vars_: dict[str, Var], globals_: dict) -> dict[str, int]:
    """Variables (main's, file-scope) initialised with an integer literal: a table's index."""
    out = {}
    for name, v in vars_.items():
        text = (text_or_none(v.init) or "").strip() if v.init is not None else ""
        if text.isdigit():
            out[name] = int(text)
    for name, (src, _node, d) in globals_.items():
        value = d.child_by_field_name("value") if d.type == "init_declarator" else None
        if value is not None and src.text(value).strip().isdigit() and name not in out:
            out[name] = int(src.text(value).strip())
    return out
