"""Calls through function pointers and tables of them (`impls[kImpl](...)`, `table[k].run(...)`,
`impl_fn f = run_sum; f(...)`, `std::function<...> f = run_sum;`): which of the program's functions the
call runs, when the program says so (one target, an initialiser or one assignment, an index that is a
constant); otherwise the candidates with file:line, and `--entry NAME` picks one."""

from __future__ import annotations

from dataclasses import dataclass, field

from .source import identifiers, walk

WHAT_TO_PICK = "pass --entry NAME to analyse the call as that function"


@dataclass
class Holder:
    """A variable that holds functions: a pointer, a std::function, or a table (one list per element)."""

    name: str
    at: str  # where its value is given
    elements: list[list[str]] = field(default_factory=list)  # the functions named by each element


@dataclass
class Dispatch:
    at: str  # the call
    through: str  # the expression it calls through
    candidates: list[tuple[str, str]]  # (function, where the holder names it)
    target: str | None  # the one that runs, or None when the program does not say
    how: str  # why that target
    path: str = ""  # the file of the call, and where in it the called expression is (init rewrites it)
    span: tuple[int, int] = (0, 0)

    def as_json(self) -> dict:
        return {
            "at": self.at,
            "through": self.through,
            "candidates": [{"name": n, "at": a} for n, a in self.candidates],
            "target": self.target,
            "how": self.how,
        }


def function_holders(sources, functions) -> dict[str, Holder]:
    """Every variable (file scope or local) whose initialiser or assignment names one of the program's
    functions as a value, with the functions per element of its initialiser."""
    holders: dict[str, Holder] = {}
    for src in sources:
        for decl in src.nodes("init_declarator"):
            value = decl.child_by_field_name("value")
            name_node = next((n for n in walk(decl.child_by_field_name("declarator")) if n.type == "identifier"), None)
            if value is None or name_node is None or value.type == "lambda_expression":
                continue
            elements = _elements(src, value, functions)
            if any(elements):
                h = holders.setdefault(src.text(name_node), Holder(src.text(name_node), src.at(decl)))
                h.elements += elements
        for a in src.nodes("assignment_expression"):
            left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
            if left is None or right is None or left.type != "identifier":
                continue
            names = _named(src, right, functions)
            if names:
                h = holders.setdefault(src.text(left), Holder(src.text(left), src.at(a)))
                h.elements.append(names)
    return holders


def _elements(src, value, functions) -> list[list[str]]:
    if value.type == "initializer_list":  # a table: one list per element, in order
        return [_named(src, e, functions) for e in value.named_children if e.type != "comment"]
    return [_named(src, value, functions)]


def _named(src, node, functions) -> list[str]:
    """The program's functions an expression names as values (not calls)."""
    out = []
    for i in identifiers(node):
        name = src.text(i)
        parent = i.parent
        called = parent is not None and parent.type == "call_expression" and parent.child_by_field_name("function") == i
        if name in functions and not called and name not in out:
            out.append(name)
    return out


def resolve(src, call, holders: dict[str, Holder], constants: dict[str, int], entry: str | None) -> Dispatch | None:
    """The function a call through a holder runs, or None when the call goes through no holder."""
    fn = call.child_by_field_name("function")
    if fn is None or fn.type == "qualified_identifier":
        return None
    ids = [src.text(i) for i in ([fn] if fn.type == "identifier" else identifiers(fn))]
    held = [holders[i] for i in ids if i in holders]
    if not held:
        return None
    h = held[0]
    candidates: list[tuple[str, str]] = []
    for element in h.elements:
        for name in element:
            if name not in [c for c, _ in candidates]:
                candidates.append((name, h.at))
    names = [c for c, _ in candidates]
    d = Dispatch(src.at(call), src.text(fn), candidates, None, "", src.path, (fn.start_byte, fn.end_byte))
    if entry is not None and entry in names:
        d.target, d.how = entry, "--entry"
    elif len(names) == 1:
        d.target, d.how = names[0], f"{h.name} holds only {names[0]} ({h.at})"
    else:
        index = _constant_index(src, fn, h.name, constants)
        if index is not None and 0 <= index < len(h.elements) and len(h.elements[index]) == 1:
            d.target, d.how = h.elements[index][0], f"{h.name}[{index}] ({h.at})"
    return d


def _constant_index(src, fn, table: str, constants: dict[str, int]) -> int | None:
    """The index of `table[i]` in the called expression when it is a literal or a constant."""
    for sub in walk(fn):
        if sub.type != "subscript_expression":
            continue
        arg = sub.child_by_field_name("argument")
        if arg is None or src.text(arg) != table:
            continue
        idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
        text = src.text(idx).strip("[] ") if idx is not None else ""
        if text.isdigit():
            return int(text)
        return constants.get(text)
    return None


def unresolved_message(d: Dispatch) -> str:
    listed = ", ".join(f"{n} ({a})" for n, a in d.candidates)
    return (
        f"the call through {d.through} runs one of {listed}, chosen at run time: the analysis cannot "
        f"tell which; {WHAT_TO_PICK}"
    )


def target_of(dispatches, src, call) -> str | None:
    """The function a call through a holder was resolved to (None for any other call)."""
    fn = call.child_by_field_name("function")
    for d in dispatches:
        if fn is not None and d.path == src.path and d.span == (fn.start_byte, fn.end_byte):
            return d.target
    return None


def lambda_holders(sources) -> dict[str, tuple]:
    """Variables initialised with a lambda: name -> (source, the lambda_expression)."""
    out: dict[str, tuple] = {}
    for src in sources:
        for decl in src.nodes("init_declarator"):
            value = decl.child_by_field_name("value")
            name = decl.child_by_field_name("declarator")
            if (
                value is not None
                and value.type == "lambda_expression"
                and name is not None
                and name.type == "identifier"
            ):
                out.setdefault(src.text(name), (src, value))
    return out


def lambda_parameters(src, lam) -> tuple[list[str], set[str]]:
    """The lambda's parameter names in order, and those that are pointers."""
    decl = next((c for c in lam.named_children if c.type == "lambda_declarator"), None)
    params = decl.child_by_field_name("parameters") if decl is not None else None
    names: list[str] = []
    pointers: set[str] = set()
    for p in params.named_children if params is not None else []:
        if p.type != "parameter_declaration":
            continue
        d = p.child_by_field_name("declarator")
        pointer = False
        while d is not None and d.type != "identifier":
            pointer = pointer or d.type == "pointer_declarator"
            d = d.child_by_field_name("declarator")
        if d is not None:
            names.append(src.text(d))
            if pointer:
                pointers.add(src.text(d))
    return names, pointers


def inside_lambda(node, stop) -> bool:
    """Whether `node` sits in a lambda's body below `stop` (its statement): it runs where the lambda is
    called, not where it is written."""
    n = node.parent
    while n is not None and n != stop:
        if n.type == "lambda_expression":
            return True
        n = n.parent
    return False
