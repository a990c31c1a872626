"""Values a program reads from its command line or environment, with the default it falls back to when
nothing is given: `argc > 1 ? atoi(argv[1]) : 2048`, `get_argval<int>(argv, argv + argc, "-nx", 16384)`,
`getenv("N") ? atoi(getenv("N")) : 64`, `atoi(getenv("N") ?: "64")`. The default is the program's own
value, so a workload can make it a config parameter (and scale it for hidden configs) instead of copying
an expression over argv into code that has no argv."""

from __future__ import annotations

from .evaluate import evaluate
from .source import call_args, call_name, walk

ENV_CALLS = {"getenv", "secure_getenv"}


def reads_command_line(node, src, calls_getenv=lambda name: False) -> bool:
    for n in walk(node):
        if n.type == "identifier" and src.text(n) in ("argv", "argc"):
            return True
        if n.type == "call_expression":
            name = call_name(n, src)
            if name in ENV_CALLS or (name is not None and calls_getenv(name)):
                return True
    return False


def default_of(node, src) -> int | None:
    """The integer the expression takes when the command line and environment give nothing, or None when
    the program has no literal default there."""
    if node is None:
        return None
    t = node.type
    if t in ("parenthesized_expression", "cast_expression"):
        inner = (
            node.child_by_field_name("value")
            if t == "cast_expression"
            else next((c for c in node.named_children if c.type != "comment"), None)
        )
        return default_of(inner, src)
    if t == "conditional_expression":  # c ? from_argv : default (or the other way round)
        for field in ("alternative", "consequence"):
            branch = node.child_by_field_name(field)
            value = _literal(branch, src)
            if value is not None:
                return value
        for field in ("alternative", "consequence"):
            value = default_of(node.child_by_field_name(field), src)
            if value is not None:
                return value
        return None
    if t == "call_expression":  # get_argval(argv, ..., "-nx", 16384): the last literal number
        args = call_args(node)
        for a in reversed(args):
            value = _literal(a, src)
            if value is not None and a.type != "string_literal":
                return value
        if call_name(node, src) in ("atoi", "atol", "atoll", "strtol", "strtoul", "strtoull", "stoi", "stol") and args:
            return default_of(args[0], src)
        return None
    if t == "binary_expression" and src.text(node.child_by_field_name("operator")) == "?:":
        return _literal(node.child_by_field_name("right"), src)
    return _literal(node, src)


def _literal(node, src) -> int | None:
    if node is None:
        return None
    if node.type == "string_literal":  # atoi(getenv("N") ?: "64")
        text = src.text(node).strip('"')
        return int(text) if text.lstrip("-").isdigit() else None
    return evaluate(node, src, {})
