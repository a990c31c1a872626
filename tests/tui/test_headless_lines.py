"""`cuco run --headless` into a pipe: one line per finished candidate and per state change on stdout (so
`> run.log` and `| tee` keep them), each arriving as it happens (not one frame at the end), and Ctrl-C ends
it with 130, as a shell expects."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _read_lines(proc: subprocess.Popen, want, timeout: float) -> list[str]:
    """Lines of the pipe as they arrive, until `want(lines)` holds (or the time runs out)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    lines: list[str] = []
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not want(lines):
        if not sel.select(timeout=0.5):
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        *done, buf = buf.split(b"\n")
        lines += [line.decode() for line in done]
    return lines


def test_headless_into_a_pipe_is_line_by_line_and_ctrl_c_exits_130(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cuco_tui.cli",
            "--home",
            str(tmp_path),
            "run",
            "demo",
            "--headless",
            "--max-evals",
            "200",
            "--name",
            "pipe-1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        results = lambda lines: [line for line in lines if " #" in line and "evaluated]" in line]  # noqa: E731
        lines = _read_lines(proc, lambda got: len(results(got)) >= 3, 240)
        assert proc.poll() is None, "the run ended before it was interrupted"
        found = results(lines)
        assert len(found) >= 3, lines  # three finished candidates, each on its own line, live
        assert any("run running" in line for line in lines), lines  # the state change
        assert all("\r" not in line and "\x1b" not in line for line in lines), lines  # no redraw frames
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 130
    err = proc.stderr.read().decode()
    assert "evaluated]" not in err and "run running" not in err, err  # progress is not a diagnostic
