"""A small constant evaluator over the syntax tree: integer literals, + - * / % << >>, parentheses,
casts, sizeof of known types, `?:` with a known condition, and names with known values. Anything else is
None (unknown): sizes known only at run time are reported, never guessed."""

from __future__ import annotations

from . import api
from .source import parse_text


def evaluate(node, src, env: dict[str, int]):
    if node is None:
        return None
    t = node.type
    if t == "number_literal":
        text = src.text(node).lower().rstrip("ul").replace("'", "")
        try:
            if any(c in text for c in ".e") and not text.startswith("0x"):
                return None
            return int(text, 0)
        except ValueError:
            return None
    if t == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        return evaluate(inner[0], src, env) if inner else None
    if t == "cast_expression":
        return evaluate(node.child_by_field_name("value"), src, env)
    if t == "identifier":
        return env.get(src.text(node))
    if t in ("true", "false"):
        return int(t == "true")
    if t == "sizeof_expression":
        ty = node.child_by_field_name("type")
        return api.ELEM_BYTES.get(src.text(ty).strip()) if ty is not None else None
    if t == "unary_expression":
        v = evaluate(node.child_by_field_name("argument"), src, env)
        op = src.text(node.child_by_field_name("operator"))
        return None if v is None else (-v if op == "-" else v if op == "+" else int(not v) if op == "!" else None)
    if t == "conditional_expression":
        cond = evaluate(node.child_by_field_name("condition"), src, env)
        if cond is None:
            return None
        return evaluate(node.child_by_field_name("consequence" if cond else "alternative"), src, env)
    if t == "binary_expression":
        a = evaluate(node.child_by_field_name("left"), src, env)
        b = evaluate(node.child_by_field_name("right"), src, env)
        if a is None or b is None:
            return None
        op = src.text(node.child_by_field_name("operator"))
        try:
            return {
                "+": lambda: a + b,
                "-": lambda: a - b,
                "*": lambda: a * b,
                "/": lambda: a // b,
                "%": lambda: a % b,
                "<<": lambda: a << b,
                ">>": lambda: a >> b,
                "<": lambda: int(a < b),
                ">": lambda: int(a > b),
                "<=": lambda: int(a <= b),
                ">=": lambda: int(a >= b),
                "==": lambda: int(a == b),
                "!=": lambda: int(a != b),
                "&&": lambda: int(bool(a) and bool(b)),
                "||": lambda: int(bool(a) or bool(b)),
            }[op]()
        except (KeyError, ZeroDivisionError):
            return None
    return None


def evaluate_text(text: str, env: dict[str, int]):
    src = parse_text(f"void f(){{ long long v_ = ({text}); }}")
    for n in _walk(src.tree.root_node):
        if n.type == "init_declarator":
            return evaluate(n.child_by_field_name("value"), src, env)
    return None


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))
