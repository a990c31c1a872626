"""Serve a command's Textual app to browsers with textual-serve: each browser tab that opens the page gets
its own process of the command (here `cuco attach RUN`, a client of the run's engine like any terminal),
its screen streamed over a websocket to xterm.js in the page.

textual-serve is Textual's own web front end (the same driver protocol as `textual serve`), maintained with
Textual itself; nothing of the app changes to run in a browser.
"""

from __future__ import annotations

import ipaddress


def url_host(host: str) -> str:
    """`host` as it goes in a URL (an IPv6 address in brackets)."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def serve_command(command: str, host: str, port: int, title: str) -> None:
    """Serve until SIGINT or SIGTERM (blocks)."""
    from textual_serve.server import Server
    server = Server(command, host=host, port=port, title=title, public_url=f"http://{url_host(host)}:{port}")
    server.serve()
