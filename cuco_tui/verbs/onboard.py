"""`cuco analyze FILE.cu... [--json]` and `cuco init FILE.cu [--name NAME] [--ranks R] [-o DIR] [--llm MODEL]`:
bring your own host-driven CUDA + NCCL program. The analysis and the scaffolding live in engine/onboard;
this module only parses arguments and presents.

Exit codes: 0 done, 1 the workload was written but does not build or verify here (init --llm), 2 bad input
(a file that does not parse, has no NCCL call, hides its collectives, or an existing output folder).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from engine.evaluation.evaluation import evaluate_source, fresh_seed
from engine.evaluation.executors import close_executor, open_executor
from engine.llm.budget import Budget
from engine.llm.models import ModelSpec, parse_models
from engine.llm.pricing import Pricing
from engine.onboard.analyze import analyze_files
from engine.onboard.entry import analyze_helper_as_main
from engine.onboard.report import render_tree, to_json
from engine.onboard.rewrites.attach import attach_rewrites
from engine.onboard.scaffold import InitResult, write_workload
from engine.onboard.sweep import analyze_one_size
from engine.workload import load_workload
from remote.errors import InputError
from remote.jobs import NoUsableNode

from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, home_from
from .rewrite import rewrite_lines
from .source_flags import assumptions, compiler_flags, flags


def register(subparsers: Any) -> None:
    a = subparsers.add_parser(
        "analyze",
        help="analyse a host-driven CUDA + NCCL program (communicators, "
        "collectives, kernels, buffers, dataflow, overlap opportunities)",
    )
    a.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    a.add_argument("--json", action="store_true", help="print the analysis as JSON (schema cuco-analysis/1)")
    compiler_flags(a)
    a.set_defaults(func=cmd_analyze)
    i = subparsers.add_parser("init", help="turn a host-driven CUDA + NCCL program into a workload folder")
    i.add_argument("files", nargs="+", metavar="FILE.cu", help="the program's sources (main() in one of them)")
    i.add_argument("--name", help="workload name (default: the file's name)")
    i.add_argument("--ranks", type=int, default=2, help="ranks (GPUs) per job (default 2)")
    i.add_argument("-o", "--output", metavar="DIR", help="the workload folder to write (default: ./workloads/NAME)")
    i.add_argument("--llm", metavar="MODEL", help="let the fast path complete the parts init could not place")
    i.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    compiler_flags(i)
    i.set_defaults(func=cmd_init)


def cmd_analyze(args: argparse.Namespace) -> int:
    try:
        prog = analyze_files(
            list(args.files),
            flags(args),
            args.compile_commands,
            args.region,
            args.entry,
            assumptions(args.assume),
            makefile=args.makefile,
        )
        data = to_json(prog)
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        Console().print(render_tree(data))
        print("schedule rewrites (cuco init makes them design-space points; cuco rewrite applies them)")
        for line in rewrite_lines(prog):
            print(line)
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    try:
        if args.ranks < 1:
            raise InputError("--ranks", "--ranks", "must be >= 1")
        model = None
        if args.llm:
            model = parse_models([args.llm])[0]  # a bad model name is bad input: nothing written
        prog = analyze_files(
            list(args.files),
            flags(args),
            args.compile_commands,
            args.region,
            args.entry,
            assumptions(args.assume),
            makefile=args.makefile,
            for_harness=True,
        )
        flag_notes = prog.flag_notes
        prog = analyze_one_size(prog, args.region, args.entry, assumptions(args.assume))
        prog = analyze_helper_as_main(prog, args.region, args.entry, assumptions(args.assume))
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
        rc = asyncio.run(complete(result, model, args))
        if rc != EXIT_OK:
            return rc
    elif model is not None:
        print("nothing to complete: init placed everything")
    # After the completion: a variant carries the whole schedule block, setup() included.
    attached = attach_rewrites(prog, result.root)
    for point in attached.points:
        print(f"  rewrite variant rewrites={point}")
    for note in attached.notes:
        print(f"  rewrite note {note}")
    print(f"next: cuco validate {result.root}   then: cuco run {result.root}")
    return EXIT_OK


async def complete(result: InitResult, model: ModelSpec, args: argparse.Namespace) -> int:
    """--llm: the model completes the TODOs; every answer is built and verified on this machine's GPUs."""
    # Here, not at the top: the LLM SDKs are optional (a GPU node may have neither) and take over a second
    # to import, which no other verb should pay.
    from engine.llm.service import LLMService
    from engine.onboard.complete import BASELINE_FILE, chat_with, complete_todos

    home = home_from(args)
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
