"""`cuco analyze FILE.cu... [--json]` and `cuco init FILE.cu [--name NAME] [--ranks R] [-o DIR] [--llm MODEL]`:
bring your own host-driven CUDA + NCCL program. The analysis and the scaffolding live in engine/onboard;
this module only parses arguments and presents.

Exit codes: 0 done, 1 the workload was written but does not build or verify here (init --llm), 2 bad input
(a file that does not parse, has no NCCL call, hides its collectives, or an existing output folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from remote.errors import InputError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers) -> None:
    a = subparsers.add_parser(
        "analyze",
        help="analyse a host-driven CUDA + NCCL program (communicators, "
        "collectives, kernels, buffers, dataflow, overlap opportunities)",
    )
    a.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    a.add_argument("--json", action="store_true", help="print the analysis as JSON (schema cuco-analysis/1)")
    _compiler_flags(a)
    a.set_defaults(func=cmd_analyze)
    i = subparsers.add_parser("init", help="turn a host-driven CUDA + NCCL program into a workload folder")
    i.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    i.add_argument("--name", help="workload name (default: the file's name)")
    i.add_argument("--ranks", type=int, default=2, help="ranks (GPUs) per job (default 2)")
    i.add_argument("-o", "--output", metavar="DIR", help="the workload folder to write (default: ./workloads/NAME)")
    i.add_argument("--llm", metavar="MODEL", help="let the fast path complete the parts init could not place")
    i.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    _compiler_flags(i)
    i.set_defaults(func=cmd_init)


def _compiler_flags(p: argparse.ArgumentParser) -> None:
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


def _flags(args: argparse.Namespace):
    from engine.onboard.preprocess import Flags

    return Flags(tuple(args.defines), tuple(args.undefines), tuple(args.include_dirs))


def _assumptions(items: list[str]) -> dict[str, int]:
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


def cmd_analyze(args: argparse.Namespace) -> int:
    from engine.onboard.analyze import analyze_files
    from engine.onboard.report import render_tree, to_json

    from .cli_rewrite import rewrite_lines

    try:
        prog = analyze_files(
            list(args.files),
            _flags(args),
            args.compile_commands,
            args.region,
            args.entry,
            _assumptions(args.assume),
            makefile=args.makefile,
        )
        data = to_json(prog)
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        from rich.console import Console

        Console().print(render_tree(data))
        print("schedule rewrites (cuco init makes them design-space points; cuco rewrite applies them)")
        for line in rewrite_lines(prog):
            print(line)
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.onboard.analyze import analyze_files
    from engine.onboard.entry import analyze_helper_as_main
    from engine.onboard.scaffold import write_workload
    from engine.onboard.sweep import analyze_one_size

    try:
        if args.ranks < 1:
            raise InputError("--ranks", "--ranks", "must be >= 1")
        model = None
        if args.llm:
            from engine.llm.models import parse_models

            model = parse_models([args.llm])[0]  # a bad model name is bad input: nothing written
        prog = analyze_files(
            list(args.files),
            _flags(args),
            args.compile_commands,
            args.region,
            args.entry,
            _assumptions(args.assume),
            makefile=args.makefile,
            for_harness=True,
        )
        flag_notes = prog.flag_notes
        prog = analyze_one_size(prog, args.region, args.entry, _assumptions(args.assume))
        prog = analyze_helper_as_main(prog, args.region, args.entry, _assumptions(args.assume))
        prog.flag_notes = flag_notes
        name = args.name or Path(args.files[0]).stem.lower().replace("-", "_")
        out = Path(args.output) if args.output else Path.cwd() / "workloads" / name
        result = write_workload(prog, out, name=name, ranks=args.ranks)
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote workload {result.name} to {result.root}")
    for note in flag_notes:
        print(f"  flags {note}")
    for note in result.notes:
        print(f"  note {note}")
    for todo in result.todos:
        print(f"  TODO {todo}")
    if model is not None and result.todos:
        import asyncio

        rc = asyncio.run(_complete(result, model, args))
        if rc != EXIT_OK:
            return rc
    elif model is not None:
        print("nothing to complete: init placed everything")
    # After the completion: a variant carries the whole schedule block, setup() included.
    from engine.onboard.rewrites.attach import attach_rewrites

    attached = attach_rewrites(prog, result.root)
    for point in attached.points:
        print(f"  rewrite variant rewrites={point}")
    for note in attached.notes:
        print(f"  rewrite note {note}")
    print(f"next: cuco validate {result.root}   then: cuco run {result.root}")
    return EXIT_OK


async def _complete(result, model, args: argparse.Namespace) -> int:
    """--llm: the model completes the TODOs; every answer is built and verified on this machine's GPUs."""
    from cuco_tui.launch import resolve_home
    from engine.evaluation.evaluation import evaluate_source, fresh_seed
    from engine.evaluation.executors import close_executor, open_executor
    from engine.llm.budget import Budget
    from engine.llm.pricing import Pricing
    from engine.llm.service import LLMService
    from engine.onboard.complete import BASELINE_FILE, chat_with, complete_todos
    from engine.workload import load_workload
    from remote.jobs import NoUsableNode

    home = resolve_home(getattr(args, "home", None))
    workload = load_workload(str(result.root))
    try:  # first, so that a machine that cannot verify stops before any LLM cost
        executor = await open_executor(home, None, gpus_per_job=workload.launch_gpus, workload_name=workload.name)
    except NoUsableNode as exc:
        print(f"cuco: --llm: {exc}; the workload is written, its TODOs stay", file=sys.stderr)
        return EXIT_FAILED
    service = LLMService([model], Pricing.load(home), Budget(None))
    counter = {"n": 0}

    async def evaluate(source: str, baseline: str):  # against the baseline the answer's setup makes
        counter["n"] += 1
        answered = dataclasses.replace(
            workload, harness_files={**workload.harness_files, BASELINE_FILE: baseline.encode()}
        )
        return await evaluate_source(
            answered, source, executor, job_prefix=f"init-{workload.name}-{counter['n']}", seed=fresh_seed()
        )

    try:
        done = await complete_todos(
            result.root,
            result.todos,
            chat_with(service, model.name),
            evaluate,
            log=lambda text: print(f"cuco init --llm: {text}", file=sys.stderr),
        )
    finally:
        await service.close()
        await close_executor(executor)
    if not done.ok:
        print(f"cuco init --llm: {done.reason}", file=sys.stderr)
        return EXIT_FAILED
    print(f"the model completed the TODOs (verified, attempt {done.attempts})")
    return EXIT_OK
