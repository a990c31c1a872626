"""`cuco serve [RUN] [--host 127.0.0.1] [--port 8000] [--public [--public-url URL]]`: the TUI of a run in a
browser, for its user only.

Each browser tab runs `cuco attach RUN` behind the page (textual-serve), so several browsers and terminals
see the same run at once, each a client of its engine. The address printed carries a random token: without
it (or the cookie the first load leaves) every request is refused, as is any request from another page's
origin. Loopback only unless --public; from another machine, forward the port over SSH, or put a TLS proxy
in front and pass --public --public-url https://... (docs/tui.md shows how).
"""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import socket
import sys
from typing import Any
from urllib.parse import urlsplit

from remote.errors import InputError

from .common import EXIT_OK, home_and_run

WHY_LOOPBACK = (
    "the page gives whoever holds its address (with the token) control of the run, and without TLS "
    "the token crosses the network in clear; from another machine reach it over an SSH port "
    "forward instead: ssh -L {port}:127.0.0.1:{port} THIS_HOST, then open the address printed"
)


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
        raise InputError(
            "--host",
            host,
            "is not a loopback address; " + WHY_LOOPBACK.format(port=port) + ". To serve on it anyway pass --public",
        )
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise InputError(
            "--port", str(port), f"cannot listen on {host}:{port} ({exc.strerror}); pick another with --port"
        ) from None


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def check_public_url(url: str | None, public: bool, host: str) -> None:
    if url is None:
        if public and is_wildcard(host):  # the page must name an address browsers reach, and accept its origin
            raise InputError(
                "--public-url",
                "(missing)",
                f"--host {host} listens everywhere; pass the address "
                "browsers will open, e.g. --public-url https://gpu-box.example.org (a TLS proxy) or "
                "--public-url http://gpu-box:PORT",
            )
        return
    if not public:
        raise InputError("--public-url", url, "goes with --public (the address of a proxy in front of cuco serve)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise InputError("--public-url", url, "must be the address browsers open, e.g. https://cuco.example.org")


def attach_argv(home: Any, run_id: str) -> list[str]:
    """What each browser tab runs (no shell): this interpreter's `cuco attach`, on this project home."""
    return [sys.executable, "-m", "cuco_tui.cli", "--home", str(home), "attach", run_id]


def cmd_serve(args: argparse.Namespace) -> int:
    # Here, not at the top: the web server (aiohttp, textual-serve) takes 0.6 s to import, which only this
    # verb needs.
    from ..web_server import serve_command, url_host

    check_address(args.host, args.port, args.public)
    check_public_url(args.public_url, args.public, args.host)
    home, run_id = home_and_run(args)
    loopback = is_loopback(args.host)
    if not loopback and not (args.public_url or "").startswith("https:"):
        print(
            "cuco serve: WARNING: serving on a non-loopback address without TLS: "
            + WHY_LOOPBACK.format(port=args.port),
            file=sys.stderr,
        )
    public_url = (args.public_url or f"http://{url_host(args.host)}:{args.port}").rstrip("/")
    token = secrets.token_urlsafe(32)
    serve_command(
        attach_argv(home, run_id),
        args.host,
        args.port,
        title=f"cuco {run_id}",
        token=token,
        public_url=public_url,
        loopback=loopback,
        announce=f"cuco serve: run {run_id} at {public_url}/?token={token} (only this address opens it; ctrl+c "
        "stops serving, the run goes on)",
    )
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve the TUI of a run to browsers (loopback by default)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument(
        "--public",
        action="store_true",
        help="allow a non-loopback --host (the token still guards it; put TLS in front)",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="with --public: the address browsers open, e.g. a TLS proxy's https://host (its origin "
        "is the one accepted)",
    )
    p.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)
