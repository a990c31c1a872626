"""`cuco serve` driven as a person would, through Debian's headless chromium (chromedriver + selenium): load
the page at the address `cuco serve` printed (its token), read the run's name in the header, press space, see
the run paused in `cuco report --json`, and a second tab on the same run sees the same state. A screenshot of
the page is saved and must not be blank. Nobody else drives it: a request or a WebSocket without the token,
or from another page's origin (a page the same browser opened), is refused and the run is untouched. And the
processes end: a tab closed while its TUI starts takes its process with it, and killing `cuco serve` with
tabs open leaves no `cuco attach` behind.

The header is read from the page's own terminal (xterm.js) buffer: a script added before the page's
scripts keeps a reference to the terminal the page creates, and the test reads its lines.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.browser import assert_not_blank, open_chromium, require_browser

require_browser()

RUN = "web-run-1"
KEEP_TERMINAL = """(() => { const bind = Function.prototype.bind;
  Function.prototype.bind = function (self, ...rest) {
    if (self && !window.__cucoTerm && self._core && self._addonManager) window.__cucoTerm = self;
    return bind.call(this, self, ...rest); }; })();"""
READ_SCREEN = """const t = window.__cucoTerm; if (!t) return null; const b = t.buffer.active; const out = [];
for (let i = 0; i < t.rows; i++) { const l = b.getLine(i); out.push(l ? l.translateToString(true) : ''); }
return out.join('\\n');"""


def _cuco(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, step: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


@pytest.fixture
def live_run(tmp_path):
    """A real engine daemon on workloads/demo, running."""
    from cuco_tui.verbs.detached import run_detached
    from engine.config import RunConfig
    from engine.workload import load_workload

    home = tmp_path / "home"
    rc = run_detached(
        home, RUN, load_workload("demo").root, RunConfig(max_evals=100000, concurrency=1), None, attach=False
    )
    assert rc == 0
    yield home
    _cuco(home, "stop", RUN)


def _report(home: Path) -> dict:
    out = _cuco(home, "report", RUN, "--json")
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _cuco_processes(home: Path, what: str) -> list[int]:
    """Live processes of this home whose command line runs `cuco ... what` (no zombies, not the engine)."""
    home_s, out = str(home), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except (OSError, IndexError):
            continue
        if home_s in argv and what in argv and "cuco_tui.cli" in argv:
            out.append(int(pid))
    return out


class Served:
    """`cuco serve RUN` on a free port, and the address (with its token) it printed."""

    def __init__(self, home: Path, tmp_path: Path):
        self.home, self.port = home, _free_port()
        self.log_path = tmp_path / f"serve-{self.port}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cuco_tui.cli", "--home", str(home), "serve", RUN, "--port", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        printed = _wait(lambda: "?token=" in self.log_path.read_text() and self.log_path.read_text(), 30)
        assert printed, self.log_path.read_text()
        self.url = next(w for w in printed.split() if "?token=" in w)
        self.token = self.url.split("?token=", 1)[1]
        assert self.url == f"http://127.0.0.1:{self.port}/?token={self.token}" and len(self.token) >= 32

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        assert _wait(listening, 30), self.log_path.read_text()

    def end(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)  # cuco serve alone: its tabs' processes must follow by themselves
        self.proc.wait(30)
        self.log.close()


def _open_page(driver, url: str) -> None:
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": KEEP_TERMINAL})
    driver.get(url)


def _header(driver) -> str:
    screen = driver.execute_script(READ_SCREEN) or ""
    return next((line for line in screen.splitlines() if line.strip().startswith(RUN)), "")


def test_serve_in_a_browser_pauses_the_run(live_run, tmp_path):
    home = live_run
    served = Served(home, tmp_path)
    driver = None
    try:
        driver = open_chromium(tmp_path / "chromium-profile")
        _open_page(driver, served.url)
        assert RUN in _wait(lambda: "[running]" in _header(driver) and _header(driver), 60), driver.execute_script(
            READ_SCREEN
        )
        assert "token" not in driver.current_url  # traded for a cookie, gone from the address bar
        assert _report(home)["state"] == "running"

        driver.execute_script("document.querySelector('.xterm-helper-textarea').focus()")
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(driver).send_keys(" ").perform()  # space: pause
        assert _wait(lambda: _report(home).get("state") == "paused", 30), _report(home)
        assert _wait(lambda: "[paused]" in _header(driver), 20), _header(driver)

        shot = tmp_path / "serve.png"
        assert driver.save_screenshot(str(shot))
        assert_not_blank(shot)

        driver.switch_to.new_window("tab")  # a second browser tab on the same run
        _open_page(driver, f"http://127.0.0.1:{served.port}/")  # the cookie is enough now
        assert _wait(lambda: "[paused]" in _header(driver), 60), driver.execute_script(READ_SCREEN)
    finally:
        if driver is not None:
            driver.quit()
        served.end()
    assert _wait(lambda: not _cuco_processes(home, "attach"), 5), _cuco_processes(home, "attach")


FOREIGN_WEBSOCKET = """const done = arguments[arguments.length - 1];
const ws = new WebSocket(arguments[0]); let opened = false;
ws.onopen = () => { opened = true; ws.send(JSON.stringify(["stdin", " "])); };
ws.onclose = (e) => done({opened: opened, code: e.code});
setTimeout(() => done({opened: opened, code: -1}), 8000);"""


def _http(port: int, path: str, headers: dict[str, str] | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def _ws_status(port: int, headers: dict[str, str]) -> int:
    """The status of a WebSocket handshake to /ws (101: opened, and closed again at once)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(
                f"http://127.0.0.1:{port}/ws?width=80&height=24",
                headers=headers,
                timeout=aiohttp.ClientWSTimeout(ws_close=5),
            ) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def test_nobody_else_drives_it(live_run, tmp_path):
    import asyncio

    home = live_run
    served = Served(home, tmp_path)
    origin = f"http://127.0.0.1:{served.port}"
    foreign_dir = tmp_path / "foreign"
    foreign_dir.mkdir()
    (foreign_dir / "index.html").write_text("<html><body>another site</body></html>")
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(foreign_dir), **kw)  # noqa: E731
    foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    driver = None
    try:
        assert _wait(lambda: _report(home).get("evaluated", 0) >= 1, 60)
        runs_before = [e for e in _events(home) if e["kind"] in ("run", "mark", "fork")]
        cookie = {"Cookie": f"cuco_serve_token={served.token}"}
        # without the token: the page, its scripts and its WebSocket are refused; with it, served
        assert _http(served.port, "/") == 403
        assert _http(served.port, "/static/js/textual.js") == 403
        assert _http(served.port, "/?token=" + "x" * len(served.token)) == 403
        assert _http(served.port, "/", cookie) == 200
        assert asyncio.run(_ws_status(served.port, {"Origin": origin})) == 403
        # with the token, from another origin (or none, as no browser would): refused
        assert asyncio.run(_ws_status(served.port, {**cookie, "Origin": "http://evil.example"})) == 403
        assert asyncio.run(_ws_status(served.port, {**cookie, "Origin": "http://127.0.0.1:1"})) == 403
        assert asyncio.run(_ws_status(served.port, cookie)) == 403
        assert asyncio.run(_ws_status(served.port, {**cookie, "Origin": origin})) == 101  # the page's own

        # a real browser that holds the cookie, on another site's page (same host, another port: the cookie
        # goes along, the Origin gives it away): its WebSocket never opens, and so never presses space
        driver = open_chromium(tmp_path / "chromium-profile")
        driver.get(served.url)
        assert _wait(lambda: driver.get_cookie("cuco_serve_token"), 30)
        driver.get(f"http://127.0.0.1:{foreign.server_address[1]}/index.html")
        driver.set_script_timeout(20)
        result = driver.execute_async_script(FOREIGN_WEBSOCKET, f"ws://127.0.0.1:{served.port}/ws?width=80&height=24")
        assert result["opened"] is False, result
        time.sleep(2)
        assert _report(home)["state"] == "running"
        assert [e for e in _events(home) if e["kind"] in ("run", "mark", "fork")] == runs_before
        assert "foreign origin" in served.log_path.read_text()
    finally:
        if driver is not None:
            driver.quit()
        foreign.shutdown()
        served.end()


def _events(home: Path) -> list[dict]:
    from engine.store.store import ReadStore

    store = ReadStore(home)
    try:
        return store.events_since(0, RUN)
    finally:
        store.close()


def test_killing_serve_leaves_no_process(live_run, tmp_path):
    home = live_run
    served = Served(home, tmp_path)
    driver = None
    try:
        driver = open_chromium(tmp_path / "chromium-profile")
        _open_page(driver, served.url)
        for tab in range(3):
            if tab:
                driver.switch_to.new_window("tab")
                _open_page(driver, f"http://127.0.0.1:{served.port}/")
            assert _wait(lambda: "[running]" in _header(driver), 60), driver.execute_script(READ_SCREEN)
        assert len(_cuco_processes(home, "attach")) == 3
        # a fourth tab closed while its TUI starts: its process goes with it, cuco serve runs on
        driver.switch_to.new_window("tab")
        driver.get(f"http://127.0.0.1:{served.port}/")
        assert _wait(lambda: len(_cuco_processes(home, "attach")) == 4, 30, step=0.05)
        driver.close()
        driver.switch_to.window(driver.window_handles[0])
        assert _wait(lambda: len(_cuco_processes(home, "attach")) == 3, 8), _cuco_processes(home, "attach")
        assert served.proc.poll() is None
        served.end(signal.SIGKILL)  # no chance to clean up: the tabs' processes die with it all the same
        gone = _wait(lambda: not _cuco_processes(home, "attach") and not _cuco_processes(home, "serve"), 5)
        assert gone, _cuco_processes(home, "attach")
        assert _report(home)["state"] == "running"  # the engine is no child of serve: it runs on
    finally:
        if driver is not None:
            driver.quit()
        served.end()
