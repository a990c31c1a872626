"""Calls through virtual methods (`impl->run(...)`, `b.run()`): which override runs, when the program says
so by how it makes the object (its dynamic type known from its construction: `Derived d; Base& b = d;`,
`std::unique_ptr<Base> p = std::make_unique<Derived>(...)`, `Base* p = new Derived` or one assignment of
it, a factory function whose every return makes the same type); otherwise the overrides with file:line,
and `--entry Class::method` picks one. The override is named `Class::method` in the analysis; `cuco init`
carries it as a free function (`free_name`), which it can when the override uses none of the object's
members."""

from __future__ import annotations

from dataclasses import dataclass, field

from .dispatch import Dispatch
from .source import call_name, walk

MAKERS = ("make_unique", "make_shared")


@dataclass
class ClassInfo:
    name: str
    at: str
    bases: list[str] = field(default_factory=list)
    members: set[str] = field(default_factory=set)  # its data members' names


def classes_of(sources) -> dict[str, ClassInfo]:
    """Every class or struct with a body, its bases and data members."""
    out: dict[str, ClassInfo] = {}
    for src in sources:
        for spec in [*src.nodes("class_specifier"), *src.nodes("struct_specifier")]:
            name, body = spec.child_by_field_name("name"), spec.child_by_field_name("body")
            if name is None or body is None:
                continue
            info = out.setdefault(src.text(name), ClassInfo(src.text(name), src.at(spec)))
            for clause in (c for c in spec.named_children if c.type == "base_class_clause"):
                info.bases += [src.text(t) for t in clause.named_children if t.type == "type_identifier"]
            for f in body.named_children:
                if f.type == "field_declaration" and not any(d.type == "function_declarator" for d in walk(f)):
                    info.members.update(src.text(d) for d in walk(f) if d.type == "field_identifier")
    return out


def method_definitions(sources, classes: dict[str, ClassInfo]) -> dict[str, tuple]:
    """`Class::method` -> (source, function_definition) for every method with a body: in the class's body
    or out of it (`void Class::method(...) {...}`)."""
    out: dict[str, tuple] = {}
    for src in sources:
        for fn in src.nodes("function_definition"):
            decl = fn.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            ident = decl.child_by_field_name("declarator") if decl is not None else None
            if ident is None:
                continue
            if ident.type == "qualified_identifier":
                owner, _, method = src.text(ident).rpartition("::")
                if owner in classes:
                    out.setdefault(f"{owner}::{method}", (src, fn))
            elif ident.type == "field_identifier":
                body = fn.parent
                spec = body.parent if body is not None and body.type == "field_declaration_list" else None
                name = spec.child_by_field_name("name") if spec is not None else None
                if name is not None and src.text(name) in classes:
                    out.setdefault(f"{src.text(name)}::{src.text(ident)}", (src, fn))
    return out


def free_name(method: str) -> str:
    """The name of the override carried as a free function: `CubeReducer::run` -> `CubeReducer__run`."""
    return method.replace("::", "__")


def uses_members(src, fn, info: ClassInfo | None) -> list[str]:
    """The object's members (`this`, its data members) the method's body uses."""
    body = fn.child_by_field_name("body")
    found = []
    for n in walk(body) if body is not None else []:
        text = src.text(n) if n.type in ("this", "identifier", "field_identifier") else ""
        if (n.type == "this" or (info is not None and n.type == "identifier" and text in info.members)) and (
            text not in found
        ):
            found.append(text)
    return found


class Virtuals:
    """The program's classes and their methods: resolves a call through an object to the override."""

    def __init__(self, sources, functions: dict[str, tuple]):
        self.sources = sources
        self.classes = classes_of(sources)
        self.methods = method_definitions(sources, self.classes)
        self.functions = functions

    def resolve(self, src, call, entry: str | None) -> Dispatch | None:
        fn = call.child_by_field_name("function")
        if fn is None or fn.type != "field_expression":
            return None
        obj, field_node = fn.child_by_field_name("argument"), fn.child_by_field_name("field")
        if obj is None or field_node is None or obj.type != "identifier":
            return None
        method = src.text(field_node)
        overrides = [m for m in self.methods if m.rsplit("::", 1)[1] == method]
        if not overrides:
            return None
        made = self._dynamic_type(src, call, src.text(obj))
        static = self._static_type(src, call, src.text(obj))
        if static is not None:
            overrides = [m for m in overrides if self._derives(m.rsplit("::", 1)[0], static)] or overrides
        candidates = [(m, self.methods[m][0].at(self.methods[m][1])) for m in overrides]
        d = Dispatch(src.at(call), src.text(fn), candidates, None, "", src.path, (fn.start_byte, fn.end_byte))
        if entry is not None and entry in overrides:
            d.target, d.how = entry, "--entry"
        elif made is not None and (target := self._override(made[0], method)) is not None:
            d.target, d.how = target, made[1]
        elif len(overrides) == 1:
            d.target, d.how = overrides[0], f"the only override of {method}"
        return d

    def _override(self, cls: str, method: str) -> str | None:
        """The definition of `method` a `cls` object runs: its own, else its nearest base's."""
        seen, todo = set(), [cls]
        while todo:
            c = todo.pop(0)
            if c in seen:
                continue
            seen.add(c)
            if f"{c}::{method}" in self.methods:
                return f"{c}::{method}"
            todo += self.classes[c].bases if c in self.classes else []
        return None

    def _derives(self, cls: str, base: str) -> bool:
        seen, todo = set(), [cls]
        while todo:
            c = todo.pop()
            if c == base:
                return True
            if c not in seen:
                seen.add(c)
                todo += self.classes[c].bases if c in self.classes else []
        return False

    def _scope(self, node):
        n = node
        while n.parent is not None and n.type != "function_definition":
            n = n.parent
        return n

    def _declaration(self, src, at, name: str):
        """The declaration of `name` visible from `at`: in its function, else at file scope."""
        for scope in (self._scope(at), src.tree.root_node):
            for decl in src.nodes("declaration", scope):
                for d in decl.children_by_field_name("declarator"):
                    ident = next((i for i in walk(d) if i.type == "identifier"), None)
                    if ident is not None and src.text(ident) == name:
                        return decl, d
        return None

    def _static_type(self, src, at, name: str) -> str | None:
        found = self._declaration(src, at, name)
        if found is None:
            return None
        texts = [src.text(t) for t in walk(found[0].child_by_field_name("type")) if t.type == "type_identifier"]
        return next((t for t in reversed(texts) if t in self.classes), None)

    def _dynamic_type(self, src, at, name: str) -> tuple[str, str] | None:
        """(the class of the object `name` refers to, how the program says so), or None."""
        found = self._declaration(src, at, name)
        if found is None:
            return None
        decl, d = found
        value = d.child_by_field_name("value") if d.type == "init_declarator" else None
        if d.type != "init_declarator" and not any(
            n.type in ("pointer_declarator", "reference_declarator") for n in walk(d)
        ):
            own = self._static_type(src, at, name)  # an object, not a pointer: its own type
            return (own, f"{name} is a {own} ({src.at(decl)})") if own else None
        assignments = [
            a.child_by_field_name("right")
            for a in src.nodes("assignment_expression", self._scope(at))
            if src.text(a.child_by_field_name("left")) == name
        ]
        values = [v for v in [value, *assignments] if v is not None and src.text(v) not in ("nullptr", "NULL", "0")]
        if len(values) != 1:
            return None
        made = self._made(src, values[0], at, depth=0)
        return (made[0], f"{name} is {made[1]} ({src.at(values[0])})") if made else None

    def _made(self, src, value, at, depth: int) -> tuple[str, str] | None:
        """The class an expression makes or refers to: `new D(...)`, `std::make_unique<D>(...)`, `d` or
        `&d` (an object of class D), or a call of a factory whose every return makes the same class."""
        if value.type in ("argument_list", "initializer_list") and value.named_child_count == 1:
            value = value.named_children[0]
        made: dict[str, str] = {}  # the classes the expression makes: one, or the program chooses at run time
        for n in walk(value):
            if n.type == "new_expression":
                t = n.child_by_field_name("type")
                if t is not None and src.text(t) in self.classes:
                    made.setdefault(src.text(t), f"new {src.text(t)}")
            if n.type == "template_function" and src.text(n.child_by_field_name("name")) in MAKERS:
                args = n.child_by_field_name("arguments")
                t = args.named_children[0] if args is not None and args.named_child_count else None
                if t is not None and src.text(t) in self.classes:
                    made.setdefault(src.text(t), src.text(n))
        if any(n.type == "conditional_expression" for n in walk(value)):
            return None  # chosen at run time
        if made:
            return next(iter(made.items())) if len(made) == 1 else None
        target = value.child_by_field_name("argument") if value.type == "pointer_expression" else value
        if target is not None and target.type == "identifier":
            refers = self._dynamic_type(src, at, src.text(target))
            return (refers[0], f"{src.text(value)}: {refers[1]}") if refers else None
        if value.type == "call_expression" and depth < 4:
            factory = self.functions.get(call_name(value, src) or "")
            if factory is None:
                return None
            fsrc, fdef = factory
            made_all = {
                self._made(fsrc, r.named_children[0], r, depth + 1)
                for r in fsrc.nodes("return_statement", fdef)
                if r.named_child_count
            }
            kinds = {m[0] for m in made_all if m is not None}
            if len(kinds) == 1 and None not in made_all:
                kind = kinds.pop()
                return kind, f"made by {call_name(value, src)}(), which returns only a {kind} ({fsrc.at(fdef)})"
        return None


def find_method(sources, name: str | None) -> tuple | None:
    """(source, definition) of the method `Class::method`, or None."""
    if name is None or "::" not in name:
        return None
    return method_definitions(sources, classes_of(sources)).get(name)


def specifier_edits(src, fn) -> list[tuple[int, int, str]]:
    """Edits that take a method's `virtual`, `override` and `final` out of its head (its free form)."""
    body = fn.child_by_field_name("body")
    end = body.start_byte if body is not None else fn.end_byte
    return [
        (n.start_byte, n.end_byte, "")
        for n in walk(fn)
        if n.end_byte <= end and (n.type == "virtual_specifier" or (n.type == "virtual" and not n.named_children))
    ]


def members_todo(sources, method: str) -> str | None:
    """Why the override cannot run as a free function (it uses the object's members), or None."""
    found = find_method(sources, method)
    if found is None:
        return None
    msrc, mdef = found
    used = uses_members(msrc, mdef, classes_of(sources).get(method.rsplit("::", 1)[0]))
    if not used:
        return None
    return (
        f"{method} uses its object's members ({', '.join(used)}): the workload runs it as the free function "
        f"{free_name(method)}, which has no object; pass them as parameters"
    )
