"""`cuco rewrite FILE... [--apply NAME,...] [--knob K=V] [-o PATCH]`: the schedule rewrites the analysis
offers for a program (each with its reason where refused), and, with --apply, the program rewritten as a
unified diff against the user's files (`patch -p1` in their folder; their Makefile builds it).

Exit codes: 0 done, 2 bad input (a file the analysis cannot read, a rewrite that does not apply).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from remote.errors import InputError

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def register(subparsers) -> None:
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
    from .cli_onboard import _compiler_flags

    _compiler_flags(r)
    r.set_defaults(func=cmd_rewrite)


def _analyze(args: argparse.Namespace):
    """The analysis, read with the same flags as `cuco analyze`."""
    from engine.onboard.analyze import analyze_files

    from .cli_onboard import _assumptions, _flags

    return analyze_files(
        list(args.files), _flags(args), args.compile_commands, args.region, args.entry, _assumptions(args.assume)
    )


def offers_for(args: argparse.Namespace):
    """The analysis of the files, and the facts the rewrites read from it."""
    from engine.onboard.rewrites import FactsError, facts_from_analysis

    prog = _analyze(args)
    try:
        return facts_from_analysis(prog)
    except FactsError as exc:
        raise InputError(args.files[0], "region", str(exc)) from None


def _verdicts(prog) -> list:
    from engine.onboard.rewrites import REGISTRY, FactsError, Refusal, check_all, facts_from_analysis

    try:
        return check_all(facts_from_analysis(prog))
    except FactsError as exc:
        return [Refusal(r.name, str(exc)) for r in REGISTRY]


def rewrite_lines(prog) -> list[str]:
    from engine.onboard.rewrites import Refusal

    out = []
    for v in _verdicts(prog):
        if isinstance(v, Refusal):
            out.append(f"  refused {v.rewrite}: {v.reason}")
        else:
            knobs = "".join(f"  [{k}: {' '.join(vals)}]" for k, vals in v.knobs.items())
            out.append(f"  offered {v.rewrite}: {v.what}{knobs}")
    return out


def cmd_rewrite(args: argparse.Namespace) -> int:
    from engine.onboard.patch import unified_diff
    from engine.onboard.rewrites import RewriteError, rewrite_program

    try:
        if not args.apply:
            for line in rewrite_lines(_analyze(args)):
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
    return _print_patch(unified_diff(facts.texts, texts), notes, args.output, f"wrote {args.output}")


def export_patch(args: argparse.Namespace) -> int:
    """`cuco export RUN --patch [--candidate ID] [-o FILE]`: the accepted (or best, or named) candidate as
    a patch against the user's files."""
    from engine.onboard.export_patch import patch_for
    from engine.onboard.rewrites import RewriteError
    from engine.store.store import ReadStore
    from engine.views.report import build_report

    from .cli import _resolve_run, home_from

    home = home_from(args)
    try:
        run_id = _resolve_run(home, args.run)
        store = ReadStore(home)
        try:
            if args.candidate is not None:
                cid = args.candidate
            else:
                report = build_report(store, run_id)
                ids = report["accepted"] or ([report["best"]["candidate"]] if report["best"] else [])
                if not ids:
                    raise InputError("RUN", run_id, "has no accepted or correct candidate to export; pass --candidate")
                cid = ids[0]
            row = store.candidate(cid)
            if row is None or row["run_id"] != run_id:
                raise InputError("--candidate", str(cid), f"no candidate {cid} in run {run_id}")
            source = store.source(cid)
            run = store.run(run_id)
            if run is None:  # resolved above: gone only if the store changed meanwhile
                raise InputError("RUN", run_id, f"no such run in {home}")
            root = Path(run["workload_path"])
        finally:
            store.close()
        diff, notes = patch_for(source, root, f"candidate {cid}")
    except (InputError, RewriteError) as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _print_patch(
        diff,
        notes,
        args.output if args.output != "-" else None,
        f"candidate {cid} (speedup {row['speedup'] or 0:.3f}x) -> {args.output} (patch -p1 in your program's folder)",
    )


def _print_patch(diff: str, notes: list[str], output: str | None, wrote: str) -> int:
    """The patch into `output` (then `wrote` on stdout), or onto stdout; the rewrites' notes on stderr."""
    if output:
        Path(output).write_text(diff)
        print(wrote)
    else:
        sys.stdout.write(diff)
    for note in notes:
        print(f"  note {note}", file=sys.stderr)
    return EXIT_OK
