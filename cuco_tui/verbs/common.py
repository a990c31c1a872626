"""What every verb shares: exit codes, the project home and run an invocation names, one-line failures and
`--set KEY=VALUE` settings. Below every verb module; imports none of them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remote.errors import InputError

from ..launch import RunNotFound, resolve_home, resolve_run

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it (128 + SIGINT)

Handler = Callable[[argparse.Namespace], int]


def add_verb(subparsers: Any, name: str, func: Handler, help_text: str) -> argparse.ArgumentParser:
    """A verb's parser, its help shown as its description too; `func` handles it."""
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.set_defaults(func=func)
    return p


def home_from(args: argparse.Namespace) -> Path:
    """One rule for every verb: --home, $CUCO_HOME, ./.cuco."""
    return resolve_home(getattr(args, "home", None))


def named_run(home: Path, run: str | None) -> str:
    """The one rule (cuco_tui.launch.resolve_run): the named run, else the only live one, else the newest."""
    try:
        return resolve_run(home, run)
    except RunNotFound as exc:
        raise InputError("RUN", run or "(omitted)", str(exc)) from None


def home_and_run(args: argparse.Namespace) -> tuple[Path, str]:
    """The home and the run of a verb that steers a run (its error names the home)."""
    home = home_from(args)
    try:
        return home, resolve_run(home, getattr(args, "run", None))
    except RunNotFound as exc:
        raise InputError(str(home), "RUN", str(exc)) from None


def fail(message: str, exc: BaseException | None = None) -> int:
    """One line on stderr; exit 2 when the engine said the input was the user's to fix."""
    print(f"cuco: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT if getattr(exc, "bad_input", False) else EXIT_FAILED


def parse_sets(items: list[str] | None, verb: str = "fork") -> dict[str, Any]:
    """`--set KEY=VALUE` items as settings; strategy edits may repeat (--set strategy.add=... twice)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(verb, "--set", f"{item!r} must look like KEY=VALUE (e.g. islands=4)")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key.startswith("strategy.") and key in out:
            out[key] = [*(out[key] if isinstance(out[key], list) else [out[key]]), value.strip()]
        else:
            out[key] = value.strip()
    return out
