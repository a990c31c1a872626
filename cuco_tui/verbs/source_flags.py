"""The flags `cuco analyze`, `cuco init` and `cuco rewrite` share: how the program's own build compiles it
(-D, -U, -I, a compile_commands.json or a Makefile) and where its repeated region is."""

from __future__ import annotations

import argparse

from engine.onboard.preprocess import Flags
from remote.errors import InputError


def compiler_flags(p: argparse.ArgumentParser) -> None:
    """The flags the program's own build passes, so the analysis reads what the compiler reads."""
    p.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="define a macro, as for the compiler (repeatable)",
    )
    p.add_argument(
        "-U", dest="undefines", action="append", default=[], metavar="NAME", help="undefine a macro (repeatable)"
    )
    p.add_argument(
        "-I", dest="include_dirs", action="append", default=[], metavar="DIR", help="a header folder (repeatable)"
    )
    p.add_argument(
        "--region",
        metavar="FILE:LINE",
        help="the repeated region: the loop that starts at this line (see the analysis's alternatives)",
    )
    p.add_argument(
        "--entry",
        metavar="NAME",
        help="a call through a function-pointer table (of NCCL functions or of the program's own): analyse "
        "it as a call to NAME",
    )
    p.add_argument(
        "--assume",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a run-time flag's value: operations under a condition false with it leave the region "
        "(repeatable; true/false or an integer)",
    )
    p.add_argument(
        "--compile-commands",
        metavar="FILE",
        help="a compile_commands.json (CMake, Bear): each file's -D/-U/-I from its entry",
    )
    p.add_argument(
        "--makefile",
        metavar="FILE",
        help="the program's Makefile: each file's -D/-U/-I from the recipe line that compiles it (read, "
        "not run); init also names its libraries the harness cannot link",
    )


def flags(args: argparse.Namespace) -> Flags:
    """The -D, -U and -I flags given."""
    return Flags(tuple(args.defines), tuple(args.undefines), tuple(args.include_dirs))


def assumptions(items: list[str]) -> dict[str, int]:
    """--assume NAME=VALUE items: each run-time flag's value (true and false read as 1 and 0)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        value = {"true": "1", "false": "0"}.get(value.strip().lower(), value.strip())
        if not sep or not name.strip().isidentifier() or not value.lstrip("-").isdigit():
            raise InputError(
                "--assume", item, "write NAME=VALUE with an integer, true or false (e.g. --assume calculate_norm=false)"
            )
        out[name.strip()] = int(value)
    return out
