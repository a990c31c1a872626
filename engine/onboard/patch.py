"""A rewritten program as a unified diff against the user's files: paths relative to the folder that holds
them (so `patch -p1` applies it there, beside the user's own Makefile)."""

from __future__ import annotations

import difflib
import os


def common_root(paths: list[str]) -> str:
    dirs = [os.path.dirname(os.path.abspath(p)) for p in paths]
    return os.path.commonpath(dirs) if dirs else "."


def unified_diff(original: dict[str, bytes], rewritten: dict[str, bytes], root: str | None = None) -> str:
    root = root or common_root(list(original))
    out: list[str] = []
    for path in original:
        before, after = original[path], rewritten.get(path, original[path])
        if before == after:
            continue
        rel = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
        out += difflib.unified_diff(
            before.decode().splitlines(keepends=True),
            after.decode().splitlines(keepends=True),
            fromfile=f"a/{rel}",
            tofile=f"b/{rel}",
        )
    return "".join(out)
