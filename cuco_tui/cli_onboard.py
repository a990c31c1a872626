"""`cuco analyze FILE.cu... [--json]` and `cuco init FILE.cu [--name NAME] [--ranks R] [-o DIR] [--llm MODEL]`:
bring your own host-driven CUDA + NCCL program. The analysis and the scaffolding live in engine/onboard;
this module only parses arguments and presents.

Exit codes: 0 done, 1 the workload was written but does not build or verify here (init --llm), 2 bad input
(a file that does not parse, has no NCCL call, hides its collectives, or an existing output folder).
"""

from __future__ import annotations

import argparse
import json
import sys

from remote.errors import InputError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers) -> None:
    a = subparsers.add_parser("analyze", help="analyse a host-driven CUDA + NCCL program (communicators, "
                                              "collectives, kernels, buffers, dataflow, overlap opportunities)")
    a.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    a.add_argument("--json", action="store_true", help="print the analysis as JSON (schema cuco-analysis/1)")
    a.set_defaults(func=cmd_analyze)
    i = subparsers.add_parser("init", help="turn a host-driven CUDA + NCCL program into a workload folder")
    i.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    i.add_argument("--name", help="workload name (default: the file's name)")
    i.add_argument("--ranks", type=int, default=2, help="ranks (GPUs) per job (default 2)")
    i.add_argument("-o", "--output", metavar="DIR", help="the workload folder to write (default: ./workloads/NAME)")
    i.add_argument("--llm", metavar="MODEL", help="let the fast path complete the parts init could not place")
    i.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    i.set_defaults(func=cmd_init)


def cmd_analyze(args: argparse.Namespace) -> int:
    from engine.onboard.analyze import analyze_files
    from engine.onboard.report import render_tree, to_json
    try:
        data = to_json(analyze_files(list(args.files)))
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        from rich.console import Console
        Console().print(render_tree(data))
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.onboard.analyze import analyze_files
    from engine.onboard.scaffold import write_workload
    try:
        if args.ranks < 1:
            raise InputError("--ranks", "--ranks", "must be >= 1")
        prog = analyze_files(list(args.files))
        name = args.name or Path(args.files[0]).stem.lower().replace("-", "_")
        out = Path(args.output) if args.output else Path.cwd() / "workloads" / name
        result = write_workload(prog, out, name=name, ranks=args.ranks)
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote workload {result.name} to {result.root}")
    for todo in result.todos:
        print(f"  TODO {todo}")
    if args.llm:
        from cuco_tui.cli_llm_todo import complete_todos
        return complete_todos(result, args)
    print(f"next: cuco validate {result.root}   then: cuco run {result.root}")
    return EXIT_OK
