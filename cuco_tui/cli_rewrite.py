"""`cuco rewrite FILE... [--apply NAME,...] [--knob K=V] [-o PATCH]`: the schedule rewrites the analysis
offers for a program (each with its reason where refused), and, with --apply, the program rewritten as a
unified diff against the user's files (`patch -p1` in their folder; their Makefile builds it).

Exit codes: 0 done, 2 bad input (a file the analysis cannot read, a rewrite that does not apply).
"""

from __future__ import annotations

import argparse
import sys

from remote.errors import InputError

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def register(subparsers) -> None:
    r = subparsers.add_parser("rewrite", help="list the schedule rewrites that apply to a program, or apply "
                                              "them and print the patch")
    r.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    r.add_argument("--apply", metavar="NAME,...", help="the rewrites to apply (see the list without --apply)")
    r.add_argument("--knob", action="append", default=[], metavar="K=V",
                   help="a rewrite's knob (comm_ctas=8, nccl_proto=LL128); repeatable")
    r.add_argument("-o", "--output", metavar="PATCH", help="write the patch here instead of printing it")
    r.set_defaults(func=cmd_rewrite)


def offers_for(files: list[str]):
    """The analysis of the files, and the facts the rewrites read from it."""
    from engine.onboard.analyze import analyze_files
    from engine.onboard.rewrites import FactsError, facts_from_analysis
    prog = analyze_files(files)
    try:
        return facts_from_analysis(prog)
    except FactsError as exc:
        raise InputError(files[0], "region", str(exc)) from None


def cmd_rewrite(args: argparse.Namespace) -> int:
    from engine.onboard.patch import unified_diff
    from engine.onboard.rewrites import Refusal, RewriteError, check_all, rewrite_program
    try:
        facts = offers_for(list(args.files))
        if not args.apply:
            for v in check_all(facts):
                if isinstance(v, Refusal):
                    print(f"  refused {v.rewrite}: {v.reason}")
                else:
                    knobs = "".join(f"  [{k}: {' '.join(vals)}]" for k, vals in v.knobs.items())
                    print(f"  offered {v.rewrite}: {v.what}{knobs}")
            return EXIT_OK
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
    diff = unified_diff(facts.texts, texts)
    if args.output:
        with open(args.output, "w") as f:
            f.write(diff)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(diff)
    for note in notes:
        print(f"  note {note}", file=sys.stderr)
    return EXIT_OK
