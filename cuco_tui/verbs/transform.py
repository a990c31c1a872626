"""`cuco transform WORKLOAD --llm MODEL [-o FILE] [--cluster FILE] [--build-only]`: the fast path (host-driven
-> device-initiated). With --cluster every build and verify job runs on the GPU nodes of cluster.yaml over
SSH (as `cuco run --cluster` does); API keys stay on this machine. --build-only (a machine without the
workload's GPUs) accepts an answer once it builds and passes the symbol policy, and says it is unverified.

Exit codes: 0 a verified, EVOLVE-BLOCK-marked program was written; 1 the rewrite failed or no node of the
cluster could be used; 2 bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from engine.evaluation.evaluation import BUILT, EvalOutcome, evaluate_source
from engine.evaluation.executors import START_TIMEOUT_S, close_executor, open_executor
from engine.llm.budget import Budget
from engine.llm.models import ModelSpec, parse_models
from engine.llm.pricing import Pricing
from engine.llm.retry import RetryPolicy
from engine.stages import BENCHMARK, BUILD, VERIFY
from engine.store.schema import DONE
from engine.store.store import Store
from engine.workload import Workload, load_workload
from remote.errors import InputError
from remote.jobs import NoUsableNode
from remote.registry import load_config

from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, home_from


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "transform",
        help="rewrite a host-driven workload into a device-initiated one with an LLM (fast path)",
        description="Stage A adds device-side setup, stage B replaces host collectives with device-initiated "
        "communication; every answer is built and verified; the result has EVOLVE-BLOCKs marked.",
    )
    p.add_argument("workload", metavar="WORKLOAD", help="a workload folder or the name of a shipped one")
    p.add_argument(
        "--llm",
        action="append",
        default=[],
        metavar="MODEL",
        required=True,
        help="the model, e.g. anthropic:claude-sonnet-4-6 (the first one given is used)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the result (default: ./<workload>-fast<ext of the candidate>)",
    )
    p.add_argument("--budget-usd", type=float, help="stop once this much LLM cost is committed")
    p.add_argument("--max-a", type=int, default=5, help="iterations of stage A (default 5)")
    p.add_argument("--max-b", type=int, default=10, help="iterations of stage B (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the evaluation inputs")
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="cluster.yaml: build and verify on GPU nodes over SSH or through Slurm (default: this machine)",
    )
    p.add_argument(
        "--build-only",
        action="store_true",
        help="build each answer and check it against the symbol policy, but run nothing (no GPU "
        "needed): the result is NOT verified; verify it later with cuco run on GPU nodes",
    )
    p.add_argument(
        "--llm-timeout-s",
        type=float,
        default=180.0,
        metavar="S",
        help="how long one LLM request may take (default 180; a slow local model may need more)",
    )
    p.add_argument(
        "--llm-max-attempts",
        type=int,
        default=4,
        metavar="N",
        help="attempts per LLM request, with backoff on 429, 5xx and timeouts (default 4)",
    )
    p.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_transform)


class EnvironmentFault(Exception):
    """A build or run failed for a reason no answer can fix (NCCL missing, a node lost, a full disk): the
    user hears it, the model does not."""


def cmd_transform(args: argparse.Namespace) -> int:
    try:
        workload = load_workload(args.workload)
        specs = parse_models(list(args.llm))
        if args.budget_usd is not None and args.budget_usd < 0:
            raise InputError("--budget-usd", "--budget-usd", "must be >= 0")
        if args.llm_timeout_s <= 0:
            raise InputError("--llm-timeout-s", "--llm-timeout-s", f"must be > 0 (got {args.llm_timeout_s:g})")
        for name in ("max_a", "max_b", "llm_max_attempts"):
            if getattr(args, name) < 1:
                raise InputError(f"--{name.replace('_', '-')}", f"--{name.replace('_', '-')}", "must be >= 1")
        output = (
            Path(args.output)
            if args.output
            else Path.cwd() / f"{workload.name}-fast{Path(workload.candidate_file).suffix}"
        )
        cluster = cluster_file(args.cluster)
        home = home_from(args)
        pricing = Pricing.load(home)
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return asyncio.run(transform(workload, specs[0], pricing, home, output, cluster, args))


def cluster_file(value: str | None) -> Path | None:
    """The cluster.yaml given with --cluster, checked before any LLM call: the same rule as `cuco run`
    for a missing file, and every field validated (InputError names the file and the field)."""
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise InputError(str(value), "--cluster", "no such file")
    load_config(path)
    return path.resolve()


async def transform(
    workload: Workload,
    spec: ModelSpec,
    pricing: Pricing,
    home: Path,
    output: Path,
    cluster: Path | None,
    args: argparse.Namespace,
) -> int:
    # Here, not at the top: the LLM SDKs are optional (a GPU node may have neither) and take over a second
    # to import, which no other verb should pay.
    from engine.llm.service import LLMService
    from engine.onboard.fast_path import FastPath

    run_id = f"transform-{workload.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:  # first, so that unusable nodes stop the verb before any LLM cost
        executor = await open_executor(
            home, cluster, gpus_per_job=0 if args.build_only else workload.launch_gpus, workload_name=workload.name
        )
    except NoUsableNode as exc:  # every node refused, or none has the GPUs: as `cuco run` reports it
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except TimeoutError:
        print(f"cuco: the nodes of {cluster} did not get ready within {START_TIMEOUT_S:.0f} s", file=sys.stderr)
        return EXIT_FAILED
    counter = {"n": 0}
    verified_on: list[str] = []  # the node that verified each correct answer (the last is the result's)

    def log(text: str) -> None:
        print(f"cuco transform: {text}", file=sys.stderr)

    async def evaluate(source: str) -> EvalOutcome:
        counter["n"] += 1
        outcome = await evaluate_source(
            workload,
            source,
            executor,
            job_prefix=f"{run_id}-{counter['n']}",
            seed=args.seed + counter["n"],
            upto=BUILD if args.build_only else BENCHMARK,
        )
        log(f"evaluation {counter['n']}: " + ", ".join(f"{s.stage} on {s.node}" for s in outcome.stages))
        if outcome.fault is not None and outcome.fault.environment:
            raise EnvironmentFault(outcome.fault.reason)
        if outcome.status == DONE:
            verified_on.extend(s.node for s in outcome.stages if s.stage == VERIFY)
        return outcome

    log(
        f"building{'' if args.build_only else ' and verifying'} on "
        f"{f'the nodes of {cluster}' if cluster else 'this machine'}"
    )
    async with contextlib.AsyncExitStack() as closing:  # each one closed on every path, even if another fails
        closing.push_async_callback(close_executor, executor)
        store = await Store(home).open()
        closing.push_async_callback(store.close)
        policy = RetryPolicy(timeout_s=args.llm_timeout_s, max_attempts=args.llm_max_attempts)
        service = LLMService([spec], pricing, Budget(args.budget_usd), policy)
        closing.push_async_callback(service.close)
        fast = FastPath(
            service,
            spec.name,
            workload,
            evaluate,
            store=store,
            run_id=run_id,
            budget_a=args.max_a,
            budget_b=args.max_b,
            log=log,
            accept_status=BUILT if args.build_only else DONE,
        )
        try:
            result = await fast.run()
        except EnvironmentFault as exc:
            print(
                f"cuco transform: stopped: the environment failed, not the answer: {exc}. Fix it and run "
                f"`cuco transform` again [LLM cost {service.budget.spent_usd:.4f} USD; calls recorded under "
                f"{run_id} in {home}]",
                file=sys.stderr,
            )
            return EXIT_FAILED
        cost = service.budget.spent_usd
    iterations = ", ".join(f"{k}: {v}" for k, v in result.iterations.items())
    if not result.ok:
        print(
            f"cuco transform: failed at stage {result.stage} ({iterations}): {result.reason} "
            f"[LLM cost {cost:.4f} USD; calls recorded under {run_id} in {home}]",
            file=sys.stderr,
        )
        return EXIT_FAILED
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(result.source)
    speed = f", speedup {result.speedup:.3f}x" if result.speedup else ""
    where = f"on node {verified_on[-1]}" if cluster and verified_on else "on this machine"
    checked = (
        "built and admitted by the symbol policy, NOT verified: run it on GPU nodes before trusting it"
        if args.build_only
        else f"verified {where}{speed}"
    )
    print(f"wrote {output} ({checked}; iterations {iterations}; LLM cost {cost:.4f} USD)")
    return EXIT_OK
