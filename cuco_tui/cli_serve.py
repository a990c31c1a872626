"""`cuco serve [RUN] [--host 127.0.0.1] [--port 8000] [--public]`: the TUI of a run in a browser.

Each browser tab runs `cuco attach RUN` behind the page (textual-serve), so several browsers and terminals
see the same run at once, each a client of its engine. Loopback only unless --public: whoever reaches the
port can pause, accept, reject, fork or stop the run, and the page has no login; from another machine,
forward the port over SSH instead.
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import socket
import sys
from typing import Any

from remote.errors import InputError

EXIT_OK = 0
WHY_LOOPBACK = ("anyone who reaches this port can pause, accept, reject, fork or stop the run (the page has no "
                "login); from another machine reach it over an SSH port forward instead: "
                "ssh -L {port}:127.0.0.1:{port} THIS_HOST, then open http://127.0.0.1:{port}")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(host: str, port: int, public: bool) -> None:
    """Refuse a non-loopback host without --public, and a port nobody can use, naming the flag."""
    if not 1 <= port <= 65535:
        raise InputError("--port", str(port), "must be 1-65535")
    if not is_loopback(host) and not public:
        raise InputError("--host", host, "is not a loopback address; " + WHY_LOOPBACK.format(port=port)
                         + ". To serve on it anyway pass --public")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise InputError("--port", str(port), f"cannot listen on {host}:{port} ({exc.strerror}); "
                         "pick another with --port") from None


def attach_command(home: Any, run_id: str) -> str:
    """What each browser tab runs: this interpreter's `cuco attach`, on this project home."""
    return shlex.join([sys.executable, "-m", "cuco_tui.cli", "--home", str(home), "attach", run_id])


def cmd_serve(args: argparse.Namespace) -> int:
    from .cli_control import _home_run
    from .web_server import serve_command, url_host
    check_address(args.host, args.port, args.public)
    home, run_id = _home_run(args)
    if not is_loopback(args.host):
        print("cuco serve: WARNING: serving on a non-loopback address: " + WHY_LOOPBACK.format(port=args.port),
              file=sys.stderr)
    print(f"cuco serve: run {run_id} at http://{url_host(args.host)}:{args.port} (ctrl+c stops serving; "
          "the run goes on)", flush=True)
    serve_command(attach_command(home, run_id), args.host, args.port, title=f"cuco {run_id}")
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="serve the TUI of a run to browsers (loopback by default)",
                              description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--public", action="store_true",
                   help="allow a non-loopback --host (anyone who reaches the port controls the run)")
    p.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)
