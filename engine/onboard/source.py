"""The parser front end: tree-sitter with the CUDA grammar (tree-sitter-cuda), and small helpers over its
syntax tree. Nothing here looks at source text with regular expressions; structure comes from the tree."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from remote.errors import InputError

from .preprocess import Flags, Preprocessed, brace_launch_configs, preprocess, terminate_statement_macros

if TYPE_CHECKING:
    from tree_sitter import Tree


@lru_cache(maxsize=1)
def cuda_parser():
    try:  # tree-sitter loads with the first parse, so a missing grammar is reported where it is needed
        import tree_sitter_cuda
        from tree_sitter import Language, Parser
    except ImportError as exc:  # the dependency is pinned in pyproject.toml
        raise InputError(
            "cuco",
            "tree-sitter",
            f"the CUDA parser is not installed ({exc}); pip install -e . installs tree-sitter and tree-sitter-cuda",
        ) from None
    return Parser(Language(tree_sitter_cuda.language()))


@dataclass
class SourceFile:
    path: str  # as the user named it (reports print it)
    data: bytes
    tree: Tree
    _index: dict | None = field(default=None, repr=False)
    pre: Preprocessed | None = field(default=None, repr=False)  # what the preprocessor did

    def nodes(self, node_type: str, within=None) -> list:
        """Every node of a type (in source order), inside `within` when given: one walk of the tree serves
        every later question (a 2,000-line program is asked thousands)."""
        if self._index is None:
            index: dict[str, tuple[list, list]] = {}
            for n in walk(self.tree.root_node):
                entry = index.setdefault(n.type, ([], []))
                entry[0].append(n.start_byte)
                entry[1].append(n)
            self._index = index
        starts, found = self._index.get(node_type, ([], []))
        if within is None:
            return found
        lo = bisect_left(starts, within.start_byte)
        out = []
        for i in range(lo, len(found)):
            n = found[i]
            if n.start_byte >= within.end_byte:
                break
            if n.end_byte <= within.end_byte:
                out.append(n)
        return out

    def text(self, node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def at(self, node) -> str:
        return f"{self.path}:{node.start_point[0] + 1}"

    def line(self, node) -> int:
        return node.start_point[0] + 1


def parse_file(path: str | Path, flags: Flags | None = None) -> SourceFile:
    """The file as its compiler reads it (the real preprocessor with the user's flags decides every #if),
    parsed; locations stay the original file:line. Everything the parser cannot read is one error naming
    every place, never a request to change code the compiler accepts."""
    pre = preprocess(str(path), flags or Flags())
    text = brace_launch_configs(pre.text)
    tree = cuda_parser().parse(text)
    if tree.root_node.has_error and pre.macros:
        text = terminate_statement_macros(text, pre.macros)
        tree = cuda_parser().parse(text)
    src = SourceFile(str(path), text, tree, pre=pre)
    bad = all_errors(tree.root_node)
    if bad:
        lines = text.decode("utf-8", "replace").splitlines()
        places = []
        for node in bad[:8]:
            row = node.start_point[0]
            line = lines[row].strip() if row < len(lines) else ""
            what = f"a missing {node.type!r} before" if node.is_missing else "the construct"
            places.append(f"{what} {line[:60]!r} at {src.at(node)}")
        more = f" (and {len(bad) - 8} more)" if len(bad) > 8 else ""
        raise InputError(
            src.at(bad[0]),
            "parser",
            "cuco's parser does not support "
            + "; ".join(places)
            + more
            + ": the preprocessor kept this text with your -D/-U/-I; if your compiler reads it "
            "with other flags, pass them (or --compile-commands FILE)",
        )
    return src


def parse_text(text: str, path: str = "<text>") -> SourceFile:
    data = text.encode()
    return SourceFile(path, data, cuda_parser().parse(data))


def all_errors(node) -> list:
    """The innermost unreadable node of each broken place, in source order (one per line)."""
    out, seen = [], set()
    stack = [node]
    while stack:
        n = stack.pop()
        if not n.has_error and not n.is_missing:
            continue
        if n.type == "ERROR" or n.is_missing:
            if n.start_point[0] not in seen:
                seen.add(n.start_point[0])
                out.append(n)
            continue
        stack.extend(reversed(n.children))
    return sorted(out, key=lambda n: n.start_byte)


def first_error(node):
    if not node.has_error:
        return None
    if node.type == "ERROR" or node.is_missing:
        return node
    for child in node.children:
        found = first_error(child)
        if found is not None:
            return found
    return node


def walk(node) -> Iterator:
    """Every node below `node` (inclusive), in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def identifiers(node) -> Iterator:
    for n in walk(node):
        if n.type == "identifier":
            yield n


class NodeText(Protocol):
    """What reading a call's name needs of a source: the text of a node (a SourceFile, or bytes alone)."""

    def text(self, node) -> str: ...


def call_name(call, src: NodeText) -> str | None:
    fn = call.child_by_field_name("function")
    if fn is None:
        return None
    if fn.type in ("identifier", "field_identifier"):
        return src.text(fn)
    if fn.type == "qualified_identifier":
        return src.text(fn).split("::")[-1]
    if fn.type == "template_function":
        return src.text(fn.child_by_field_name("name"))
    return None


def call_args(call) -> list:
    args = call.child_by_field_name("arguments")
    if args is None:
        return []
    return [c for c in args.named_children if c.type != "comment"]


def kernel_config(call):
    for c in call.children:
        if c.type == "kernel_call_syntax":
            return c
    return None


def function_declarator(fn):
    """A function definition's `function_declarator` (under any pointer or reference declarators), or None."""
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    return d


def find_function(sources, name: str | None):
    """(source, definition node) of the top-level function `name` in any of the sources, or None."""
    for s in sources:
        for node in s.tree.root_node.named_children:
            if node.type != "function_definition":
                continue
            d = function_declarator(node)
            if d is not None and s.text(d.child_by_field_name("declarator")) == name:
                return s, node
    return None


def declarator_name(decl, src: SourceFile) -> str | None:
    """The declared name under a declarator (init, pointer, array, reference, function declarators)."""
    n = decl
    while n is not None and n.type not in ("identifier", "field_identifier"):
        if n.type in (
            "init_declarator",
            "pointer_declarator",
            "array_declarator",
            "reference_declarator",
            "function_declarator",
            "parenthesized_declarator",
        ):
            nxt = n.child_by_field_name("declarator")
            if nxt is None:
                nxt = next((c for c in n.named_children if c.type in ("identifier", "pointer_declarator")), None)
            n = nxt
        else:
            return None
    return src.text(n) if n is not None else None


def names_in(expr_text: str) -> list[str]:
    """The identifiers of a C++ expression given as text (a size or count the analysis recorded)."""
    src = parse_text(f"void f(){{ long long v_ = ({expr_text}); }}")
    return [src.text(i) for i in identifiers(src.tree.root_node) if src.text(i) not in ("f", "v_")]
