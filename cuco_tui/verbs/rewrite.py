"""`cuco rewrite FILE... [--apply NAME,...] [--knob K=V] [-o PATCH]`: the schedule rewrites the analysis
offers for a program (each with its reason where refused), and, with --apply, the program rewritten as a
unified diff against the user's files (`patch -p1` in their folder; their Makefile builds it).

Exit codes: 0 done, 2 bad input (a file the analysis cannot read, a rewrite that does not apply).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.onboard.analyze import analyze_files
from engine.onboard.model import Program
from engine.onboard.patch import unified_diff
from engine.onboard.rewrites import (
    REGISTRY,
    FactsError,
    Offer,
    Refusal,
    RewriteError,
    ScheduleFacts,
    check_all,
    facts_from_analysis,
    rewrite_program,
)
from remote.errors import InputError

from .common import EXIT_BAD_INPUT, EXIT_OK
from .source_flags import assumptions, compiler_flags, flags


def register(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "rewrite", help="list the schedule rewrites that apply to a program, or apply them and print the patch"
    )
    r.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    r.add_argument("--apply", metavar="NAME,...", help="the rewrites to apply (see the list without --apply)")
    r.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="K=V",
        help="a rewrite's knob (comm_ctas=8, nccl_proto=LL128); repeatable",
    )
    r.add_argument("-o", "--output", metavar="PATCH", help="write the patch here instead of printing it")
    compiler_flags(r)
    r.set_defaults(func=cmd_rewrite)


def analyze(args: argparse.Namespace) -> Program:
    """The analysis, read with the same flags as `cuco analyze`."""
    return analyze_files(
        list(args.files), flags(args), args.compile_commands, args.region, args.entry, assumptions(args.assume)
    )


def offers_for(args: argparse.Namespace) -> ScheduleFacts:
    """The analysis of the files, and the facts the rewrites read from it."""
    prog = analyze(args)
    try:
        return facts_from_analysis(prog)
    except FactsError as exc:
        raise InputError(args.files[0], "region", str(exc)) from None


def verdicts(prog: Program) -> list[Offer | Refusal]:
    """Each rewrite's verdict on the program: offered (with its knobs) or refused (with the reason)."""
    try:
        return check_all(facts_from_analysis(prog))
    except FactsError as exc:
        return [Refusal(r.name, str(exc)) for r in REGISTRY]


def rewrite_lines(prog: Program) -> list[str]:
    out = []
    for v in verdicts(prog):
        if isinstance(v, Refusal):
            out.append(f"  refused {v.rewrite}: {v.reason}")
        else:
            knobs = "".join(f"  [{k}: {' '.join(vals)}]" for k, vals in v.knobs.items())
            out.append(f"  offered {v.rewrite}: {v.what}{knobs}")
    return out


def cmd_rewrite(args: argparse.Namespace) -> int:
    try:
        if not args.apply:
            for line in rewrite_lines(analyze(args)):
                print(line)
            return EXIT_OK
        facts = offers_for(args)
        knobs = {}
        for kv in args.knob:
            if "=" not in kv:
                raise InputError("--knob", kv, "write it as NAME=VALUE (comm_ctas=8)")
            k, v = kv.split("=", 1)
            knobs[k] = v
        names = [n.strip() for n in args.apply.split(",") if n.strip()]
        texts, notes = rewrite_program(facts, names, knobs)
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RewriteError as exc:
        print(f"cuco: {args.files[0]}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return print_patch(unified_diff(facts.texts, texts), notes, args.output, f"wrote {args.output}")


def print_patch(diff: str, notes: list[str], output: str | None, wrote: str) -> int:
    """The patch into `output` (then `wrote` on stdout), or onto stdout; the rewrites' notes on stderr."""
    if output:
        Path(output).write_text(diff)
        print(wrote)
    else:
        sys.stdout.write(diff)
    for note in notes:
        print(f"  note {note}", file=sys.stderr)
    return EXIT_OK
