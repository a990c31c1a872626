"""`cuco serve` driven as a person would, through Debian's headless chromium (chromedriver + selenium): load
the page, read the run's name in the header, press space, see the run paused in `cuco report --json`, and
a second tab on the same run sees the same state. A screenshot of the page is saved and must not be blank.

The header is read from the page's own terminal (xterm.js) buffer: a script added before the page's
scripts keeps a reference to the terminal the page creates, and the test reads its lines.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
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
        driver = open_chromium(tmp_path / "chromium-profile")
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
        assert_not_blank(shot)

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
