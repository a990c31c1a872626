"""The CLI's side of a detached engine: spawn its daemon, talk to it over its socket, read the stored state
when it is gone, and open the TUI on it. Used by `run`, `resume`, `attach`, `fork --start` and the
verbs that steer a run."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from engine.store.store import ReadStore

from ..client import EngineError, EngineGone, one_request
from ..launch import live_engine, spawn_daemon, wait_for_daemon
from .common import EXIT_BAD_INPUT, EXIT_OK, fail

COMMAND_TIMEOUT_S = 120.0
SERVED_DRIVER = "textual.drivers.web_driver:WebDriver"  # what `cuco serve` runs each browser's TUI with


async def live_socket(home: Path, run_id: str) -> str | None:
    info = await live_engine(home, run_id)
    return info.socket if info else None


async def via_socket(socket: str, op: str, **args: Any) -> dict[str, Any]:
    return await one_request(socket, op, timeout=COMMAND_TIMEOUT_S, **args)


def stored_state(home: Path, run_id: str) -> str | None:
    store = ReadStore(home)
    try:
        row = store.run(run_id)
    finally:
        store.close()
    return row["state"] if row else None


def no_terminal() -> bool:
    """A TUI needs a terminal on stdin, unless a browser drives it (`cuco serve`: its stdin is the page)."""
    if os.environ.get("TEXTUAL_DRIVER") == SERVED_DRIVER:
        return False
    try:
        return not os.isatty(sys.stdin.fileno())
    except (AttributeError, ValueError, OSError):
        return True


def attach_tui(home: Path, run_id: str) -> int:
    if no_terminal():
        print(
            f"cuco: attach {run_id}: needs a terminal (stdin is not one). Without one: cuco report {run_id} "
            f"for its state, cuco serve {run_id} for the TUI in a browser",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    # Here, not at the top: the TUI (textual, its screens, the key settings it reads) adds 0.2 s to every
    # `cuco` command that imported it; only the verbs that open it pay for it.
    from ..app import CucoApp
    from ..settings import load_settings

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


def start(home: Path, run_id: str, attach: bool) -> int:
    """Spawn a daemon that resumes `run_id` from the store, un-pause it, then attach or print how."""
    proc = spawn_daemon(home, run_id)
    try:
        info = wait_for_daemon(home, run_id, proc)
    except RuntimeError as exc:
        return fail(str(exc))
    try:
        asyncio.run(via_socket(info.socket, "resume"))
    except (EngineError, EngineGone) as exc:
        return fail(f"resume {run_id}: {exc}", exc)
    if attach:
        return attach_tui(home, run_id)
    print(f"{run_id}: engine running (pid {info.pid}); watch it with: cuco attach {run_id}")
    return EXIT_OK


def run_detached(
    home: Path, run_id: str, workload_path: Path, config: Any, cluster: str | None, attach: bool = True
) -> int:
    """`cuco run WORKLOAD` without --headless: spawn the engine daemon, wait for it, attach the TUI."""
    home = Path(home).resolve()
    without_terminal = attach and no_terminal()
    attach = attach and not without_terminal  # the engine is detached anyway: start it, and say how to watch it
    home.mkdir(parents=True, exist_ok=True)
    config_json = config.to_json() if hasattr(config, "to_json") else str(config)
    proc = spawn_daemon(
        home, run_id, create=True, workload=Path(workload_path).resolve(), config_json=config_json, cluster=cluster
    )
    try:
        info = wait_for_daemon(home, run_id, proc)
    except RuntimeError as exc:
        return fail(str(exc))
    if not attach:
        if without_terminal:
            print(f"{run_id}: no terminal on stdin, so no TUI here; the engine runs detached", file=sys.stderr)
        print(
            f"{run_id}: engine running (pid {info.pid}); watch it with: cuco attach {run_id} (or cuco serve {run_id})"
        )
        return EXIT_OK
    return attach_tui(home, run_id)
