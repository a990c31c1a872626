"""Without a terminal, `cuco attach` ends at once with what to do instead (it used to spin on a closed stdin),
and `cuco run` without --headless starts its engine detached, as always, and says how to watch it instead of
opening a TUI it cannot show."""

from __future__ import annotations

import subprocess
import sys
import time

from storefill import fill_store

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def test_attach_with_stdin_from_dev_null_exits_within_two_seconds(tmp_path):
    fill_store(tmp_path, run_id="tty-1", n=3)
    started = time.monotonic()
    done = subprocess.run(
        CLI + ["--home", str(tmp_path), "attach", "tty-1"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    took = time.monotonic() - started
    assert took < 2.0, f"took {took:.1f} s"
    assert done.returncode == 2, done.stderr
    assert "needs a terminal" in done.stderr and "cuco report tty-1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_run_without_a_terminal_starts_the_engine_detached_and_returns(tmp_path):
    from engine.daemon import protocol

    home = tmp_path / "home"
    done = subprocess.run(
        CLI + ["--home", str(home), "run", "demo", "--name", "tty-2", "--max-evals", "2"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert done.returncode == 0, done.stderr
        assert "no terminal" in done.stderr and "cuco attach tty-2" in done.stdout, (done.stdout, done.stderr)
    finally:
        info = protocol.read_run_info(home, "tty-2")
        stopped = subprocess.run(
            CLI + ["--home", str(home), "stop", "tty-2"],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    assert stopped.returncode == 0, stopped.stderr  # stopped now, or it had finished already
    assert info is None or not protocol.pid_alive(info.pid)
