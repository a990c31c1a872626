"""`cuco serve` driven as a person would, through Debian's headless chromium (chromedriver + selenium): load
the page, read the run's name in the header, press space, see the run paused in `cuco report --json`, and
a second tab on the same run sees the same state. A screenshot of the page is saved and must not be blank.

The header is read from the page's own terminal (xterm.js) buffer: a script added before the page's
scripts keeps a reference to the terminal the page creates, and the test reads its lines.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")

RUN = "web-run-1"
CHROME_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--window-size=1200,800")
KEEP_TERMINAL = """(() => { const bind = Function.prototype.bind;
  Function.prototype.bind = function (self, ...rest) {
    if (self && !window.__cucoTerm && self._core && self._addonManager) window.__cucoTerm = self;
    return bind.call(this, self, ...rest); }; })();"""
READ_SCREEN = """const t = window.__cucoTerm; if (!t) return null; const b = t.buffer.active; const out = [];
for (let i = 0; i < t.rows; i++) { const l = b.getLine(i); out.push(l ? l.translateToString(true) : ''); }
return out.join('\\n');"""


def _cuco(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuco_tui.cli", "--home", str(home), *args], capture_output=True,
                          text=True, timeout=timeout)


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


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of raw pixels of an 8-bit RGB/RGBA PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytes(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        rows.append(bytes(line))
        prev = rows[-1]
    return width, bpp, rows


@pytest.fixture
def live_run(tmp_path):
    """A real engine daemon on workloads/demo, running."""
    from cuco_tui.cli_control import run_detached
    from engine.config import RunConfig
    from engine.workload import load_workload
    home = tmp_path / "home"
    rc = run_detached(home, RUN, load_workload("demo").root, RunConfig(max_evals=100000, concurrency=1), None,
                      attach=False)
    assert rc == 0
    yield home
    _cuco(home, "stop", RUN)


def _report(home: Path) -> dict:
    out = _cuco(home, "report", RUN, "--json")
    return json.loads(out.stdout) if out.returncode == 0 else {}


def test_serve_in_a_browser_pauses_the_run(live_run, tmp_path):
    home, port = live_run, _free_port()
    log = open(tmp_path / "serve.log", "wb")
    serve = subprocess.Popen([sys.executable, "-m", "cuco_tui.cli", "--home", str(home), "serve", RUN,
                              "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    driver = None
    try:
        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0
        assert _wait(listening, 30), (tmp_path / "serve.log").read_text()
        from selenium.webdriver.chrome.service import Service
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in (*CHROME_ARGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": KEEP_TERMINAL})
        driver.get(f"http://127.0.0.1:{port}/")

        def header() -> str:
            screen = driver.execute_script(READ_SCREEN) or ""
            return next((line for line in screen.splitlines() if line.strip().startswith(RUN)), "")
        assert RUN in _wait(lambda: "[running]" in header() and header(), 60), driver.execute_script(READ_SCREEN)
        assert _report(home)["state"] == "running"

        driver.execute_script("document.querySelector('.xterm-helper-textarea').focus()")
        from selenium.webdriver.common.action_chains import ActionChains
        ActionChains(driver).send_keys(" ").perform()          # space: pause
        assert _wait(lambda: _report(home).get("state") == "paused", 30), _report(home)
        assert _wait(lambda: "[paused]" in header(), 20), header()

        shot = tmp_path / "serve.png"
        assert driver.save_screenshot(str(shot))
        width, bpp, rows = png_pixels(shot.read_bytes())
        colours = {row[x:x + 3] for row in rows[::7] for x in range(0, width * bpp, bpp * 5)}
        assert len(colours) > 8, f"the page looks blank: {len(colours)} colours in {shot}"

        driver.switch_to.new_window("tab")                      # a second browser on the same run
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": KEEP_TERMINAL})
        driver.get(f"http://127.0.0.1:{port}/")
        assert _wait(lambda: "[paused]" in header(), 60), driver.execute_script(READ_SCREEN)
    finally:
        if driver is not None:
            driver.quit()
        os.killpg(serve.pid, 15)
        serve.wait(30)
        log.close()
