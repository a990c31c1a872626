"""CLI verbs that steer a run: attach, pause, resume, stop, accept, reject, fork.

Each goes through the engine's socket when the engine lives (run.json present, its pid alive, its
socket answering), else through engine/daemon/control.py on the store (the CLI is briefly the writer).
`register(subparsers)` adds them to the lead's parser; every handler returns an exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from engine.store.store import Store
from remote.errors import InputError

from .client import EngineError, EngineGone, one_request
from .launch import RunNotFound, live_engine, resolve_home, resolve_run, spawn_daemon, wait_for_daemon

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
COMMAND_TIMEOUT_S = 120.0


def _home_run(args: argparse.Namespace, required: bool = True) -> tuple[Path, str]:
    home = resolve_home(getattr(args, "home", None))
    try:
        return home, resolve_run(home, getattr(args, "run", None))
    except RunNotFound as exc:
        raise InputError(str(home), "RUN", str(exc)) from None


def _err(message: str, exc: BaseException | None = None) -> int:
    """One line on stderr; exit 2 when the engine said the input was the user's to fix."""
    print(f"cuco: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT if getattr(exc, "bad_input", False) else EXIT_FAILED


ENDED = {"finished": "finished", "failed": "failed", "stopped": "been stopped"}
STOP_WAIT_S = 90.0  # a stop returns once the engine has ended (its jobs cancelled, its state written)


def _wait_engine_gone(home: Path, run_id: str, pid: int | None, timeout: float = STOP_WAIT_S) -> bool:
    import time

    from engine.daemon import protocol

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is None or not protocol.pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def _stored_state(home: Path, run_id: str) -> str | None:
    from engine.store.store import ReadStore

    store = ReadStore(home)
    try:
        row = store.run(run_id)
    finally:
        store.close()
    return row["state"] if row else None


async def _live_socket(home: Path, run_id: str) -> str | None:
    info = await live_engine(home, run_id)
    return info.socket if info else None


async def _via_socket(socket: str, op: str, **args: Any) -> dict[str, Any]:
    return await one_request(socket, op, timeout=COMMAND_TIMEOUT_S, **args)


async def _offline(home: Path, fn: Any, *args: Any, **kw: Any) -> Any:
    store = await Store(home).open()
    try:
        return await asyncio.wait_for(fn(store, *args, **kw), COMMAND_TIMEOUT_S)
    finally:
        await store.close()


def _command(args: argparse.Namespace, op: str, offline: Any, **payload: Any) -> int:
    home, run_id = _home_run(args)

    async def go() -> Any:
        info = await live_engine(home, run_id)
        if info is not None:
            return "live", info.pid, await _via_socket(info.socket, op, **payload)
        if offline is None:
            return "dead", None, None
        return "store", None, await offline(home, run_id)

    try:
        where, pid, reply = asyncio.run(go())
    except (EngineError, EngineGone, ValueError) as exc:
        return _err(f"{op} {run_id}: {exc}", exc)
    if where == "dead":
        return _err(f"{op} {run_id}: no live engine (restart it with: cuco resume {run_id})")
    if where == "live" and op == "stop":
        # "done" only once the engine has ended and written its state: an engine that dies on the way is
        # reported, not hidden behind its reply
        if not _wait_engine_gone(home, run_id, pid):
            return _err(f"stop {run_id}: the engine (pid {pid}) still runs after {STOP_WAIT_S:.0f} s")
        state = _stored_state(home, run_id)
        if state not in ("stopped", "finished"):
            return _err(f"stop {run_id}: the engine ended with the run {state} (see cuco report {run_id})")
    if isinstance(reply, str):  # what the store-side command found instead of doing it
        print(f"{op} {run_id}: {reply}")
        return EXIT_OK
    print(f"{op} {run_id}: done ({'engine' if where == 'live' else 'store; no live engine'})")
    return EXIT_OK


# ---- verbs


def cmd_pause(args: argparse.Namespace) -> int:
    from engine.run import control

    async def offline(home: Path, run_id: str) -> None:
        state = _stored_state(home, run_id)
        if state in ENDED:
            raise ValueError(f"the run has {ENDED[state]}; there is nothing to pause")
        await _offline(home, control.set_state, run_id, "paused", "paused by the user (no live engine)")

    return _command(args, "pause", offline, hard=bool(args.hard))


def cmd_stop(args: argparse.Namespace) -> int:
    from engine.run import control

    async def offline(home: Path, run_id: str) -> str | None:
        state = _stored_state(home, run_id)
        if state in ENDED:  # its end stays as it was (a finished run is not made `stopped`)
            return f"the run has {ENDED[state]} already; nothing to stop"
        await _offline(home, control.set_state, run_id, "stopped", "stopped by the user (no live engine)")
        return None

    return _command(args, "stop", offline)


def cmd_accept(args: argparse.Namespace) -> int:
    from engine.run import control

    async def offline(home: Path, run_id: str) -> None:
        await _offline(home, control.accept, run_id, args.candidate, args.note or "")

    return _command(args, "accept", offline, candidate=args.candidate, note=args.note or "")


def cmd_reject(args: argparse.Namespace) -> int:
    from engine.run import control

    reason = (args.reason or "").strip()
    if not reason:
        raise InputError("reject", "--reason", "a reason is required (why is this candidate wrong?)")

    async def offline(home: Path, run_id: str) -> None:
        await _offline(home, control.reject, run_id, args.candidate, reason)

    return _command(args, "reject", offline, candidate=args.candidate, reason=reason)


def cmd_strategy(args: argparse.Namespace) -> int:
    """Steer an LLM run's strategies: pin, unpin or retire one by id (s3), or add one by its text."""
    from engine.run import control

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
        await _offline(home, control.mark_strategy, run_id, args.verb, strategy, text)

    return _command(args, "strategy", offline, verdict=args.verb, strategy=strategy, text=text)


def parse_sets(items: list[str] | None, verb: str = "fork") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(verb, "--set", f"{item!r} must look like KEY=VALUE (e.g. islands=4)")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key.startswith("strategy.") and key in out:  # strategy edits repeat: --set strategy.add=... twice
            out[key] = [*(out[key] if isinstance(out[key], list) else [out[key]]), value.strip()]
        else:
            out[key] = value.strip()
    return out


def cmd_fork(args: argparse.Namespace) -> int:
    from engine.run import control

    home, run_id = _home_run(args)
    overrides = parse_sets(args.set)

    async def go() -> str:
        socket = await _live_socket(home, run_id)
        if socket is not None:
            reply = await _via_socket(
                socket, "fork", from_candidate=args.from_candidate, name=args.name, overrides=overrides
            )
            return reply["new_run"]
        return await _offline(home, control.fork, run_id, args.from_candidate, args.name, overrides)

    try:
        new_run = asyncio.run(go())
    except (EngineError, EngineGone, ValueError) as exc:
        return _err(f"fork {run_id}: {exc}", exc)
    print(f"forked {run_id} -> {new_run} (paused)")
    if args.start:
        return _start(home, new_run, attach=False)
    print(f"start it with: cuco resume {new_run}")
    return EXIT_OK


def _start(home: Path, run_id: str, attach: bool) -> int:
    """Spawn a daemon that resumes `run_id` from the store, un-pause it, then attach or print how."""
    proc = spawn_daemon(home, run_id)
    try:
        info = wait_for_daemon(home, run_id, proc)
    except RuntimeError as exc:
        return _err(str(exc))
    try:
        asyncio.run(_via_socket(info.socket, "resume"))
    except (EngineError, EngineGone) as exc:
        return _err(f"resume {run_id}: {exc}", exc)
    if attach:
        return attach_tui(home, run_id)
    print(f"{run_id}: engine running (pid {info.pid}); watch it with: cuco attach {run_id}")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    home, run_id = _home_run(args)
    socket = asyncio.run(_live_socket(home, run_id))
    if socket is not None:
        try:
            asyncio.run(_via_socket(socket, "resume"))
        except (EngineError, EngineGone) as exc:
            return _err(f"resume {run_id}: {exc}")
        print(f"resume {run_id}: done")
        return EXIT_OK
    if _stored_state(home, run_id) == "finished":
        return _err(
            f"resume {run_id}: the run has finished; to search on, fork it: "
            f"cuco fork {run_id} --set max_evals=N --start"
        )
    return _start(home, run_id, attach=args.attach)


SERVED_DRIVER = "textual.drivers.web_driver:WebDriver"  # what `cuco serve` runs each browser's TUI with


def _no_terminal() -> bool:
    """A TUI needs a terminal on stdin, unless a browser drives it (`cuco serve`: its stdin is the page)."""
    if os.environ.get("TEXTUAL_DRIVER") == SERVED_DRIVER:
        return False
    try:
        return not os.isatty(sys.stdin.fileno())
    except (AttributeError, ValueError, OSError):
        return True


def attach_tui(home: Path, run_id: str) -> int:
    if _no_terminal():
        print(
            f"cuco: attach {run_id}: needs a terminal (stdin is not one). Without one: cuco report {run_id} "
            f"for its state, cuco serve {run_id} for the TUI in a browser",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    from .app import CucoApp
    from .settings import load_settings

    info = asyncio.run(live_engine(home, run_id))
    app = CucoApp(home, run_id, socket_path=info.socket if info else None, settings=load_settings(home))
    app.run()
    if app.ended is not None:
        state, reason = app.ended
        print(
            f"run {run_id} {state}" + (f": {reason}" if reason else "") + "; its engine has ended. "
            f"See it with: cuco report {run_id}"
        )
    elif app.detached and info is not None:
        print(f"detached; the engine keeps running. Come back with: cuco attach {run_id}")
    return int(app.return_code or 0)


def cmd_attach(args: argparse.Namespace) -> int:
    home, run_id = _home_run(args)
    return attach_tui(home, run_id)


def run_detached(
    home: Path, run_id: str, workload_path: Path, config: Any, cluster: str | None, attach: bool = True
) -> int:
    """`cuco run WORKLOAD` without --headless: spawn the engine daemon, wait for it, attach the TUI."""
    home = Path(home).resolve()
    no_terminal = attach and _no_terminal()
    attach = attach and not no_terminal  # the engine is detached anyway: start it, and say how to watch it
    home.mkdir(parents=True, exist_ok=True)
    config_json = config.to_json() if hasattr(config, "to_json") else str(config)
    proc = spawn_daemon(
        home, run_id, create=True, workload=Path(workload_path).resolve(), config_json=config_json, cluster=cluster
    )
    try:
        info = wait_for_daemon(home, run_id, proc)
    except RuntimeError as exc:
        return _err(str(exc))
    if not attach:
        if no_terminal:
            print(f"{run_id}: no terminal on stdin, so no TUI here; the engine runs detached", file=sys.stderr)
        print(
            f"{run_id}: engine running (pid {info.pid}); watch it with: cuco attach {run_id} (or cuco serve {run_id})"
        )
        return EXIT_OK
    return attach_tui(home, run_id)


def register(subparsers: Any) -> None:
    def add(name: str, func: Any, help_text: str) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = add("attach", cmd_attach, "open the TUI on a run (live engine, or the store read-only)")
    p.add_argument("run", nargs="?", metavar="RUN")

    p = add("pause", cmd_pause, "pause a run: no new proposals or jobs (--hard cancels jobs in flight)")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--hard", action="store_true", help="also cancel the jobs in flight")

    # `resume` is defined once, in cli.py: its --headless form runs here in the foreground, the live
    # case delegates to cmd_resume above.

    p = add("stop", cmd_stop, "stop a run")
    p.add_argument("run", nargs="?", metavar="RUN")

    p = add("accept", cmd_accept, "accept a candidate")
    p.add_argument("run", metavar="RUN")
    p.add_argument("candidate", type=int, metavar="CANDIDATE")
    p.add_argument("--note", default="")

    p = add("reject", cmd_reject, "reject a candidate (a reason is required)")
    p.add_argument("run", metavar="RUN")
    p.add_argument("candidate", type=int, metavar="CANDIDATE")
    p.add_argument("--reason", required=True)

    p = add("strategy", cmd_strategy, "pin, unpin or retire an LLM run's strategy, or add one")
    p.add_argument("run", metavar="RUN")
    p.add_argument("verb", choices=("pin", "unpin", "retire", "add"))
    p.add_argument("what", nargs="+", metavar="ID|TEXT", help="a strategy id (s3), or for add the new strategy")
    p.add_argument("--reason", default="", help="why it is retired (shown in the report)")

    p = add("fork", cmd_fork, "fork a run from a candidate (default: its best) with config overrides")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--from", dest="from_candidate", type=int, metavar="CANDIDATE")
    p.add_argument("--name")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a config override (repeatable)")
    p.add_argument("--start", action="store_true", help="start the fork's engine now")
