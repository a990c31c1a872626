"""Without a terminal, the TUI's verbs end at once with what to do instead (they used to spin on a closed
stdin), and `cuco run` without --headless starts no engine it could not show."""

from __future__ import annotations

import subprocess
import sys
import time

from storefill import fill_store

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def test_attach_with_stdin_from_dev_null_exits_within_two_seconds(tmp_path):
    fill_store(tmp_path, run_id="tty-1", n=3)
    started = time.monotonic()
    done = subprocess.run(CLI + ["--home", str(tmp_path), "attach", "tty-1"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=30)
    took = time.monotonic() - started
    assert took < 2.0, f"took {took:.1f} s"
    assert done.returncode == 2, done.stderr
    assert "needs a terminal" in done.stderr and "cuco report tty-1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_run_without_headless_and_without_a_terminal_starts_nothing(tmp_path):
    home = tmp_path / "home"
    done = subprocess.run(CLI + ["--home", str(home), "run", "demo", "--name", "tty-2"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--headless" in done.stderr, done.stderr
    assert not (home / "runs" / "tty-2").exists()
