"""Serve a command's Textual app to browsers with textual-serve: each browser tab that opens the page gets
its own process of the command (here `cuco attach RUN`, a client of the run's engine like any terminal),
its screen streamed over a websocket to xterm.js in the page.

textual-serve is Textual's own web front end (the same driver protocol as `textual serve`), maintained with
Textual itself; nothing of the app changes to run in a browser. What cuco adds:

- Only its user drives it. A random token is in the URL `cuco serve` prints; the first load trades it for a
  cookie (HttpOnly, SameSite=Strict) and drops it from the address bar. Every HTTP and WebSocket request
  without the token is refused (403), and a request whose `Origin` is not the served address is refused
  too, so another page in the same browser can neither read the page nor open its WebSocket.
- Processes that end. Each tab's process is started without a shell, in its own process group, with a
  parent-death signal: it dies with its browser session (politely, then surely) and with `cuco serve`,
  however `cuco serve` ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import signal
import sys
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from .processes import end_groups, parent_death_signal

log = logging.getLogger("cuco.serve")

TOKEN_PARAM = "token"
COOKIE = "cuco_serve_token"
SESSION_END_GRACE_S = 2.0  # a closed tab's process may take this long to quit before its group is killed
REFUSED = (
    "cuco serve: refused. Open the address `cuco serve` printed (it carries the token), from this "
    "browser, at that address.\n"
)


def url_host(host: str) -> str:
    """`host` as it goes in a URL (an IPv6 address in brackets)."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def allowed_origins(public_url: str, host: str, port: int, loopback: bool) -> set[str]:
    """The origins a page of this server has: its public URL's, and on loopback each name of loopback."""
    origins = {origin_of(public_url)}
    if loopback:
        origins |= {f"http://{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}
    return origins


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


class Gate:
    """Who may talk to the server: the token (query or cookie) and the Origin, checked on every request."""

    def __init__(self, token: str, origins: set[str], secure_cookie: bool):
        self.token = token
        self.origins = origins
        self.secure_cookie = secure_cookie

    def refusal(self, request: Any) -> str | None:
        """Why `request` is refused, or None."""
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() not in self.origins:
            return f"foreign origin {origin}"
        if request.path == "/ws" and origin is None:
            return "a WebSocket without an Origin"
        if not (_same(request.query.get(TOKEN_PARAM), self.token) or _same(request.cookies.get(COOKIE), self.token)):
            return "no token"
        return None

    def middleware(self) -> Any:
        @web.middleware
        async def gate(request: web.Request, handler: Any) -> web.StreamResponse:
            why = self.refusal(request)
            if why is not None:
                log.warning("refused %s %s from %s: %s", request.method, request.path, request.remote, why)
                return web.Response(status=403, text=REFUSED, headers={"Cache-Control": "no-store"})
            if request.path == "/" and TOKEN_PARAM in request.query:
                # the token becomes a cookie and leaves the address bar (history, a copied link, Referer)
                query = {k: v for k, v in request.query.items() if k != TOKEN_PARAM}
                response = web.HTTPSeeOther(request.rel_url.with_query(query).path_qs if query else "/")
                response.set_cookie(
                    COOKIE, self.token, httponly=True, samesite="Strict", path="/", secure=self.secure_cookie
                )
                response.headers["Referrer-Policy"] = "no-referrer"
                return response
            response = await handler(request)
            with contextlib.suppress(Exception):
                response.headers.setdefault("Referrer-Policy", "no-referrer")
                response.headers.setdefault("X-Frame-Options", "DENY")  # no framing by another page
            return response

        return gate


def _app_service_class() -> Any:
    class TabProcess(AppService):
        """One browser tab's `cuco attach`: no shell between, its own process group, and it dies with us."""

        def __init__(self, argv: list[str], children: set[int], **kw: Any):
            super().__init__(" ".join(argv), **kw)
            self.argv = argv
            self.children = children

        async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
            environment = self._build_environment(width=width, height=height)
            self._process = process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=environment,
                start_new_session=True,
                preexec_fn=parent_death_signal(signal.SIGKILL),
            )
            self.children.add(process.pid)
            assert process.stdin is not None
            self._stdin = process.stdin
            return process

        async def stop(self) -> None:
            """Ask it to quit; a process that does not (still starting, or stuck) has its group ended."""
            process, task = self._process, self._task
            if task is None:
                return
            await self.send_meta({"type": "quit"})
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(task), SESSION_END_GRACE_S)
            if process is not None:
                await asyncio.to_thread(end_process_group, process.pid)
                self.children.discard(process.pid)
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(task, SESSION_END_GRACE_S)
            self._task = None

    return TabProcess


def end_process_group(pgid: int) -> None:
    end_groups([pgid], grace_s=SESSION_END_GRACE_S)


class OneLine(logging.Formatter):
    """A record's message alone, on one line, with the secret masked: an exception is named by its type,
    never printed with its traceback (a malformed request's, whose frames hold the token)."""

    def __init__(self, fmt: str, secret: str):
        super().__init__(fmt)
        self.secret = secret

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        text = self.formatMessage(record)
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__})"
        return " ".join(text.replace(self.secret, "<token>").split())


def make_server(
    argv: list[str], host: str, port: int, title: str, token: str, public_url: str, loopback: bool, announce: str
) -> Any:
    tab_process = _app_service_class()

    class CucoServer(Server):
        def __init__(self) -> None:
            super().__init__(" ".join(argv), host=host, port=port, title=title, public_url=public_url)
            self.gate = Gate(
                token, allowed_origins(public_url, host, port, loopback), secure_cookie=public_url.startswith("https:")
            )
            self.children: set[int] = set()  # each tab's process (and group) id

        async def _make_app(self) -> Any:
            app = await super()._make_app()
            app.middlewares.append(self.gate.middleware())
            return app

        async def on_startup(self, app: Any) -> None:  # cuco prints its own line, once it listens
            return None

        def initialize_logging(self) -> None:
            """One plain line per record on stderr: no traceback (its locals would show the token)."""
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(OneLine("cuco serve: %(message)s", token))
            logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)

        def serve(self, debug: bool = False) -> None:
            """textual-serve's loop, with `announce` printed once the port accepts connections."""
            self.debug = debug
            self.initialize_logging()
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.request_exit)
            web.run_app(
                self._make_app(),
                host=host,
                port=port,
                handle_signals=False,
                loop=loop,
                access_log=None,  # request lines carry the token on a first load
                print=lambda *_: print(announce, flush=True),  # aiohttp calls it after its sites started
            )

        async def on_shutdown(self, app: Any) -> None:
            await asyncio.to_thread(self.end_children)

        def end_children(self) -> None:
            children, self.children = list(self.children), set()
            end_groups(children, grace_s=SESSION_END_GRACE_S)

        async def handle_websocket(self, request: Any) -> Any:
            """textual-serve's handler, with each tab's process started as `TabProcess`."""
            websocket = web.WebSocketResponse(heartbeat=15)
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            service = None
            try:
                await websocket.prepare(request)
                service = tab_process(
                    argv,
                    self.children,
                    write_bytes=websocket.send_bytes,
                    write_str=websocket.send_str,
                    close=websocket.close,
                    download_manager=self.download_manager,
                    debug=self.debug,
                )
                await service.start(width, height)
                await self._process_messages(websocket, service)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await websocket.close()
            except Exception as error:  # noqa: BLE001 - one tab's failure must not end the server
                log.warning("a browser tab's connection ended: %s", type(error).__name__)
            finally:
                if service is not None:
                    await asyncio.shield(service.stop())
            return websocket

    return CucoServer()


def serve_command(
    argv: list[str], host: str, port: int, title: str, token: str, public_url: str, loopback: bool, announce: str
) -> None:
    """Serve until SIGINT or SIGTERM (blocks), printing `announce` once listening; every tab's process ends
    with it."""
    server = make_server(argv, host, port, title, token, public_url, loopback, announce)
    try:
        server.serve()
    finally:
        server.end_children()  # however the loop ended
