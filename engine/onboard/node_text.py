"""The text of a syntax-tree node, as the analyser reads a call's arguments and names."""

from __future__ import annotations

from .source import call_args, identifiers


def node_text(node) -> str:
    return node.text.decode("utf-8", "replace")


def text_or_none(node) -> str | None:
    return node_text(node) if node is not None else None


def nth_arg(call, i):
    """The call's argument `i` (None past its last, or for no index)."""
    args = call_args(call)
    return args[i] if i is not None and i < len(args) else None


def plain_name(node) -> str | None:
    """The first identifier of an expression (`&comms[i]` -> comms), or its text."""
    if node is None:
        return None
    ids = [i.text.decode() for i in identifiers(node)]
    return ids[0] if ids else node.text.decode()
