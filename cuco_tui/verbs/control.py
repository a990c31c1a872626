"""The verbs that steer a run: attach, pause, stop, accept, reject, strategy, fork.

Each goes through the engine's socket when the engine lives (run.json present, its pid alive, its
socket answering), else through engine/run/control.py on the store (the CLI is briefly the writer).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from engine.daemon import protocol
from engine.run import control
from engine.store.store import Store
from remote.errors import InputError

from ..client import EngineError, EngineGone
from ..launch import live_engine
from .common import EXIT_OK, add_verb, fail, home_and_run, parse_sets
from .detached import COMMAND_TIMEOUT_S, attach_tui, live_socket, start, stored_state, via_socket

ENDED = {"finished": "finished", "failed": "failed", "stopped": "been stopped"}
STOP_WAIT_S = 90.0  # a stop returns once the engine has ended (its jobs cancelled, its state written)


def wait_engine_gone(pid: int | None, timeout: float = STOP_WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is None or not protocol.pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


async def on_store(home: Path, fn: Any, *args: Any, **kw: Any) -> Any:
    """`fn` on the store, with no engine alive to do it."""
    store = await Store(home).open()
    try:
        return await asyncio.wait_for(fn(store, *args, **kw), COMMAND_TIMEOUT_S)
    finally:
        await store.close()


def steer(args: argparse.Namespace, op: str, offline: Any, **payload: Any) -> int:
    """`op` through the live engine's socket, else `offline` on the store; one line says which did it."""
    home, run_id = home_and_run(args)

    async def go() -> Any:
        info = await live_engine(home, run_id)
        if info is not None:
            return "live", info.pid, await via_socket(info.socket, op, **payload)
        if offline is None:
            return "dead", None, None
        return "store", None, await offline(home, run_id)

    try:
        where, pid, reply = asyncio.run(go())
    except (EngineError, EngineGone, ValueError) as exc:
        return fail(f"{op} {run_id}: {exc}", exc)
    if where == "dead":
        return fail(f"{op} {run_id}: no live engine (restart it with: cuco resume {run_id})")
    if where == "live" and op == "stop":
        # "done" only once the engine has ended and written its state: an engine that dies on the way is
        # reported, not hidden behind its reply
        if not wait_engine_gone(pid):
            return fail(f"stop {run_id}: the engine (pid {pid}) still runs after {STOP_WAIT_S:.0f} s")
        state = stored_state(home, run_id)
        if state not in ("stopped", "finished"):
            return fail(f"stop {run_id}: the engine ended with the run {state} (see cuco report {run_id})")
    if isinstance(reply, str):  # what the store-side command found instead of doing it
        print(f"{op} {run_id}: {reply}")
        return EXIT_OK
    print(f"{op} {run_id}: done ({'engine' if where == 'live' else 'store; no live engine'})")
    return EXIT_OK


def cmd_attach(args: argparse.Namespace) -> int:
    home, run_id = home_and_run(args)
    return attach_tui(home, run_id)


def cmd_pause(args: argparse.Namespace) -> int:
    async def offline(home: Path, run_id: str) -> None:
        state = stored_state(home, run_id)
        if state in ENDED:
            raise ValueError(f"the run has {ENDED[state]}; there is nothing to pause")
        await on_store(home, control.set_state, run_id, "paused", "paused by the user (no live engine)")

    return steer(args, "pause", offline, hard=bool(args.hard))


def cmd_stop(args: argparse.Namespace) -> int:
    async def offline(home: Path, run_id: str) -> str | None:
        state = stored_state(home, run_id)
        if state in ENDED:  # its end stays as it was (a finished run is not made `stopped`)
            return f"the run has {ENDED[state]} already; nothing to stop"
        await on_store(home, control.set_state, run_id, "stopped", "stopped by the user (no live engine)")
        return None

    return steer(args, "stop", offline)


def cmd_accept(args: argparse.Namespace) -> int:
    async def offline(home: Path, run_id: str) -> None:
        await on_store(home, control.accept, run_id, args.candidate, args.note or "")

    return steer(args, "accept", offline, candidate=args.candidate, note=args.note or "")


def cmd_reject(args: argparse.Namespace) -> int:
    reason = (args.reason or "").strip()
    if not reason:
        raise InputError("reject", "--reason", "a reason is required (why is this candidate wrong?)")

    async def offline(home: Path, run_id: str) -> None:
        await on_store(home, control.reject, run_id, args.candidate, reason)

    return steer(args, "reject", offline, candidate=args.candidate, reason=reason)


def cmd_strategy(args: argparse.Namespace) -> int:
    """Steer an LLM run's strategies: pin, unpin or retire one by id (s3), or add one by its text."""
    if args.verb == "add":
        strategy, text = None, " ".join(args.what).strip()
        if not text:
            raise InputError(
                "strategy", "add", 'give the new strategy\'s text: cuco strategy RUN add "what to try and why"'
            )
    else:
        if len(args.what) != 1:
            raise InputError("strategy", args.verb, f"give one strategy id: cuco strategy RUN {args.verb} s3")
        strategy, text = args.what[0], (args.reason or "")

    async def offline(home: Path, run_id: str) -> None:
        await on_store(home, control.mark_strategy, run_id, args.verb, strategy, text)

    return steer(args, "strategy", offline, verdict=args.verb, strategy=strategy, text=text)


def cmd_fork(args: argparse.Namespace) -> int:
    home, run_id = home_and_run(args)
    overrides = parse_sets(args.set)

    async def go() -> str:
        socket = await live_socket(home, run_id)
        if socket is not None:
            reply = await via_socket(
                socket, "fork", from_candidate=args.from_candidate, name=args.name, overrides=overrides
            )
            return reply["new_run"]
        return await on_store(home, control.fork, run_id, args.from_candidate, args.name, overrides)

    try:
        new_run = asyncio.run(go())
    except (EngineError, EngineGone, ValueError) as exc:
        return fail(f"fork {run_id}: {exc}", exc)
    print(f"forked {run_id} -> {new_run} (paused)")
    if args.start:
        return start(home, new_run, attach=False)
    print(f"start it with: cuco resume {new_run}")
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = add_verb(subparsers, "attach", cmd_attach, "open the TUI on a run (live engine, or the store read-only)")
    p.add_argument("run", nargs="?", metavar="RUN")

    p = add_verb(
        subparsers, "pause", cmd_pause, "pause a run: no new proposals or jobs (--hard cancels jobs in flight)"
    )
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--hard", action="store_true", help="also cancel the jobs in flight")

    p = add_verb(subparsers, "stop", cmd_stop, "stop a run")
    p.add_argument("run", nargs="?", metavar="RUN")

    p = add_verb(subparsers, "accept", cmd_accept, "accept a candidate")
    p.add_argument("run", metavar="RUN")
    p.add_argument("candidate", type=int, metavar="CANDIDATE")
    p.add_argument("--note", default="")

    p = add_verb(subparsers, "reject", cmd_reject, "reject a candidate (a reason is required)")
    p.add_argument("run", metavar="RUN")
    p.add_argument("candidate", type=int, metavar="CANDIDATE")
    p.add_argument("--reason", required=True)

    p = add_verb(subparsers, "strategy", cmd_strategy, "pin, unpin or retire an LLM run's strategy, or add one")
    p.add_argument("run", metavar="RUN")
    p.add_argument("verb", choices=("pin", "unpin", "retire", "add"))
    p.add_argument("what", nargs="+", metavar="ID|TEXT", help="a strategy id (s3), or for add the new strategy")
    p.add_argument("--reason", default="", help="why it is retired (shown in the report)")

    p = add_verb(subparsers, "fork", cmd_fork, "fork a run from a candidate (default: its best) with config overrides")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--from", dest="from_candidate", type=int, metavar="CANDIDATE")
    p.add_argument("--name")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a config override (repeatable)")
    p.add_argument("--start", action="store_true", help="start the fork's engine now")
