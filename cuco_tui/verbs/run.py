"""`cuco run WORKLOAD` and `cuco resume [RUN]`: start a run (a detached engine and the TUI, or --headless in
the foreground), and un-pause or restart one."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from engine.config import RunConfig, load_config_file
from engine.daemon.daemon import EngineServer
from engine.run.engine import Engine
from engine.store.runids import new_run_id
from engine.workload import load_workload
from remote.errors import InputError

from ..client import EngineError, EngineGone
from ..headless import HeadlessDisplay
from ..launch import live_engine
from .common import EXIT_FAILED, EXIT_OK, add_verb, fail, home_from, named_run, parse_sets
from .detached import live_socket, run_detached, start, stored_state, via_socket

# The run settings a flag of its own sets (the others: --set KEY=VALUE or --config FILE).
FLAG_SETTINGS = (
    "max_evals",
    "max_minutes",
    "target_speedup",
    "patience",
    "islands",
    "concurrency",
    "seed",
    "budget_usd",
    "ranks",
)


def add_run_settings(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a run config file (YAML: any setting of `cuco fork --set`, e.g. meta_every: 5); "
        "flags given here win over it",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any run setting, e.g. --set meta_every=5 (repeatable; wins over --config)",
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="cluster.yaml: run jobs on GPU nodes over SSH or through Slurm (docs/cluster.md)",
    )
    p.add_argument(
        "--llm",
        action="append",
        default=[],
        metavar="MODEL",
        help="an LLM mutator, e.g. anthropic:claude-sonnet-4-6 (repeatable)",
    )
    p.add_argument("--budget-usd", type=float, help="stop proposing once this much LLM cost is committed")
    p.add_argument("--max-evals", type=int, help="stop after N evaluated candidates (default 40)")
    p.add_argument("--max-minutes", type=float, help="stop after M minutes")
    p.add_argument("--target-speedup", type=float, help="stop once a candidate reaches this speedup")
    p.add_argument("--patience", type=int, help="stop after N evaluations without a new best")
    p.add_argument("--islands", type=int, help="number of islands (default 2)")
    p.add_argument("--concurrency", type=int, help="evaluations in flight at once (default 2)")
    p.add_argument("--seed", type=int, help="random seed of the search (default 0)")
    p.add_argument("--ranks", type=int, help="ranks (GPUs) per job, e.g. 4 (default: the workload's)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults, then the --config file, then --set, then the flags: the most specific wins."""
    config = RunConfig()
    if getattr(args, "config", None):
        path = Path(args.config).expanduser()
        config = RunConfig.from_dict(load_config_file(path), str(path))
    if getattr(args, "set", None):
        config = config.with_overrides(parse_sets(args.set, "run"), "--set")
    for name in FLAG_SETTINGS:
        value = getattr(args, name, None)
        if value is not None:
            setattr(config, name, value)
    if getattr(args, "llm", None):
        config.llm = list(args.llm)
        config.mutator = "llm"
    if getattr(args, "cluster", None):
        cluster = Path(args.cluster).expanduser()
        if not cluster.is_file():
            raise InputError(str(args.cluster), "--cluster", "no such file")
        config.cluster = str(cluster.resolve())
    return config.validate("command line")


def cmd_run(args: argparse.Namespace) -> int:
    workload = load_workload(args.workload)
    config = config_from_args(args)
    home = home_from(args)
    run_id = new_run_id(home, workload.name, args.name)
    if args.headless:
        return asyncio.run(run_headless(home, run_id, lambda: Engine.create(home, workload, config, run_id=run_id)))
    return run_detached(home, run_id, workload.root, config, config.cluster, attach=True)


async def run_headless(home: Path, run_id: str, open_engine: Callable[[], Awaitable[Engine]]) -> int:
    """The run in the foreground, with a progress display, until it ends; the exit code says how it ended."""
    engine = await open_engine()
    engine.exit_when_paused = True  # nobody is attached to resume it: a run that pauses itself ends, paused
    display = HeadlessDisplay(engine)
    # The engine's socket is served here too, so `cuco stop|pause|accept` and `cuco attach` from another
    # terminal reach this engine instead of writing to the store beside it (two writers).
    server = EngineServer(engine, home, run_id)

    def on_event(event: dict) -> None:
        display.on_event(event)
        server.on_event(event)

    engine.store.on_event = on_event
    loop = asyncio.get_running_loop()
    interrupted: list[int] = []

    def stop(sig: int) -> None:
        interrupted.append(sig)
        asyncio.ensure_future(engine.stop())

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig)
    state = None
    try:
        await server.start()
        with display:
            state = await engine.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.close(state, engine.stop_reason or "")
        await engine.close()
    display.print_summary(home, run_id)
    if interrupted:  # stopped by Ctrl-C (or a TERM): not a success, as a shell reads it (128 + the signal)
        return 128 + interrupted[0]
    if state == "paused":  # it paused itself (a full disk, no node left): the reason says what to do
        print(f"cuco: {run_id} {engine.stop_reason}", file=sys.stderr)
    return EXIT_FAILED if state in ("failed", "paused") else EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    """Un-pause a live run, or restart a run whose engine died (in the foreground with --headless)."""
    home = home_from(args)
    run_id = named_run(home, args.run)
    if args.headless and args.attach:
        raise InputError(
            "--attach",
            "--headless",
            "choose one: --headless restarts in the foreground, --attach restarts it detached and opens the TUI",
        )
    if args.headless:
        if asyncio.run(live_engine(home, run_id)) is not None:
            raise InputError("RUN", run_id, "its engine is alive; `cuco resume` without --headless un-pauses it")
        return asyncio.run(run_headless(home, run_id, lambda: Engine.load(home, run_id)))
    socket = asyncio.run(live_socket(home, run_id))
    if socket is not None:
        try:
            asyncio.run(via_socket(socket, "resume"))
        except (EngineError, EngineGone) as exc:
            return fail(f"resume {run_id}: {exc}")
        print(f"resume {run_id}: done")
        return EXIT_OK
    if stored_state(home, run_id) == "finished":
        return fail(
            f"resume {run_id}: the run has finished; to search on, fork it: "
            f"cuco fork {run_id} --set max_evals=N --start"
        )
    return start(home, run_id, attach=args.attach)


def register(subparsers: Any) -> None:
    p = add_verb(subparsers, "run", cmd_run, "start a run (detached engine + TUI, or --headless in the foreground)")
    p.add_argument("workload", metavar="WORKLOAD", help="a workload folder or the name of a shipped one")
    p.add_argument("--headless", action="store_true", help="run in the foreground with a progress display")
    p.add_argument("--name", help="the run's id (default WORKLOAD-N)")
    add_run_settings(p)

    p = add_verb(subparsers, "resume", cmd_resume, "un-pause a live run, or restart a run whose engine died")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--headless", action="store_true", help="restart in the foreground")
    p.add_argument("--attach", action="store_true", help="attach the TUI after restarting the engine")
