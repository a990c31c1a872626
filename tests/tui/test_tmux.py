"""As a person would: `cuco run demo` in tmux at 80x24 with 16 colours, keys, capture-pane, the store.

Also: killing the terminal (the tmux session) ends the TUI while the engine runs on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.daemon import protocol
from engine.store.store import ReadStore
from engine.views.best import best_candidate

if shutil.which("tmux") is None:
    print("tests/tui/test_tmux.py: skipped: tmux is not installed (apt-get install tmux)")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux): no terminal to drive"
    ),
]
pytest.importorskip("engine.run.engine")

REPO = Path(__file__).resolve().parents[2]
CUCO = [sys.executable, "-m", "cuco_tui.cli"]  # the interpreter running the tests (CI's venv too)


class Tmux:
    def __init__(self, tmp: Path):
        self.sock = f"cuco-test-{os.getpid()}-{tmp.name}"[:60]
        self.session = "tui"

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.sock, *args], check=True, capture_output=True, text=True, timeout=20
        ).stdout

    def start(self, command: str, env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        self.tmux(
            "new-session",
            "-d",
            "-s",
            self.session,
            "-x",
            "80",
            "-y",
            "24",
            f"cd {REPO} && env -u COLORTERM {exports} {command}; sleep 600",
        )

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.session, *keys)

    def screen(self, escapes: bool = False) -> str:
        return self.tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.session)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.3)
        raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{screen}")

    def wait_live(self, state: str, timeout: float = 60.0) -> str:
        """The header shows `[state]` and the TUI is connected (no "read-only" in the header)."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            header = next((line for line in screen.splitlines() if f"[{state}]" in line), None)
            if header is not None and "read-only" not in header:
                return screen
            time.sleep(0.3)
        raise AssertionError(f"not live and [{state}] after {timeout}s:\n{screen}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=20)


def _wait(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_a_person_in_tmux(tmp_path):
    home = tmp_path / "home"
    env = {
        "TERM": "xterm",
        "TEXTUAL_COLOR_SYSTEM": "standard",
        "TEXTUAL_ANIMATIONS": "none",
        "PYTHONPATH": str(REPO),
        "CUCO_THEME": "cuco-dark",
    }
    t = Tmux(tmp_path)
    try:
        t.start(f"{' '.join(CUCO)} run demo --home {home} --max-evals 200 --name demo-tmux", env)
        t.wait_for("demo-tmux", 60)
        db_ready = _wait(lambda: (home / "cuco.db").exists(), 30)
        assert db_ready
        db = ReadStore(home)
        run = "demo-tmux"
        assert _wait(
            lambda: (
                (
                    db.fetchone(
                        "SELECT COUNT(*) AS n FROM candidates WHERE run_id=? AND status IN "
                        "('done','incorrect','failed')",
                        (run,),
                    )
                    or {"n": 0}
                )["n"]
                >= 3
            ),
            120,
        )
        screen = t.wait_live("running", 30)
        info = protocol.live_run_info(home, run)
        assert info is not None

        # 80x24 on 16 colours: the header and every key of the footer are on screen, and the terminal
        # only gets the 16 standard colours (SGR 30-37/90-97/40-47/100-107; no 256-colour or RGB codes).
        lines = screen.splitlines()
        assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
        header = next(line for line in lines if "[running]" in line)
        assert run in header and "evals" in header, screen
        footer = lines[-1]
        for key in ("^q Stop", "space Pause", "a Accept", "x Reject", "f Fork", "/ Filter", "? Help", "q Detach"):
            assert key in footer, (key, footer)
        raw = t.screen(escapes=True)
        assert "38;5;" not in raw and "48;5;" not in raw and "38;2;" not in raw and "48;2;" not in raw, raw[:2000]

        t.keys("Space")
        assert _wait(lambda: db.run(run)["state"] == "paused", 30)
        t.wait_live("paused", 20)

        # select the first row, accept it with a note
        t.keys("Home")
        time.sleep(0.5)
        t.keys("a")
        t.wait_for("Accept candidate", 10)
        t.keys("-l", "looks right")
        t.keys("Enter")
        assert _wait(
            lambda: (
                db.fetchone("SELECT COUNT(*) AS n FROM marks WHERE verdict='accept' AND text='looks right'")["n"] == 1
            ),
            20,
        )

        # next row: reject, first without a reason (refused), then with one
        t.keys("Down")
        time.sleep(0.5)
        t.keys("x")
        t.wait_for("why?", 10)
        t.keys("Enter")
        t.wait_for("A reason is required", 10)
        t.keys("-l", "too slow")
        t.keys("Enter")
        assert _wait(
            lambda: db.fetchone("SELECT COUNT(*) AS n FROM marks WHERE verdict='reject' AND text='too slow'")["n"] == 1,
            20,
        )

        # the selected candidate's lineage, then the best's: the path from the seed is starred; still 80x24
        # on 16 colours
        t.keys("L")
        screen = t.wait_for("ancestors back to generation 0", 20)
        assert "seed" in screen and all(len(line) <= 80 for line in screen.splitlines()), screen
        assert "esc Back" in screen.splitlines()[-1] and "b Best" in screen.splitlines()[-1], screen

        def best_id() -> int:  # the run's best by its one definition: the candidate just rejected is not it
            return best_candidate(db.fetchall, run, "c.id")["id"]

        best_before = best_id()
        t.keys("b")
        screen = t.wait_for("★ ● #", 20)  # the focus (●) is now on the path to the best (★)
        focus = next(line for line in screen.splitlines() if "★ ● #" in line).split("★ ● #")[1].split()[0]
        assert int(focus) in (best_before, best_id()), screen  # (a job may finish)
        rejected = db.fetchone("SELECT candidate_id FROM marks WHERE verdict='reject' AND text='too slow'")
        assert int(focus) != rejected["candidate_id"], screen
        starred = [line for line in screen.splitlines() if "★" in line]
        assert any("seed" in line for line in starred), screen  # the path reaches generation 0
        raw = t.screen(escapes=True)
        assert "38;5;" not in raw and "48;5;" not in raw and "38;2;" not in raw and "48;2;" not in raw, raw[:2000]
        t.keys("Escape")
        t.wait_live("paused", 20)

        # fork from the selected candidate
        t.keys("f")
        t.wait_for("Fork this run", 10)
        t.keys("-l", "b2")
        t.keys("Enter")
        assert _wait(lambda: any(r["parent_run"] == run for r in db.runs()), 30)

        # detach: the TUI exits, the engine keeps running
        t.keys("q")
        t.wait_for("cuco attach", 20)
        assert protocol.live_run_info(home, run) is not None

        # attach again, resume, then lose the terminal
        t.tmux("kill-server")
        t.sock += "-again"  # a fresh tmux server: the old one may still be shutting down
        assert _wait(lambda: protocol.live_run_info(home, run) is not None, 5)
        t.start(f"{' '.join(CUCO)} attach {run} --home {home}", env)
        t.wait_live("paused", 30)
        t.keys("Space")
        assert _wait(lambda: db.run(run)["state"] == "running", 30)
        pids = subprocess.run(
            ["pgrep", "-f", f"cuco_tui.cli attach {run}"], capture_output=True, text=True
        ).stdout.split()
        assert pids
        t.kill()  # the terminal goes away
        assert _wait(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 20), "the TUI did not exit"
        info = protocol.live_run_info(home, run)
        assert info is not None and protocol.pid_alive(info.pid)  # the engine runs on
        evaluated = db.fetchone("SELECT COUNT(*) AS n FROM candidates WHERE run_id=?", (run,))["n"]
        assert _wait(
            lambda: db.fetchone("SELECT COUNT(*) AS n FROM candidates WHERE run_id=?", (run,))["n"] > evaluated, 60
        )
    finally:
        t.kill()
        info = protocol.live_run_info(home, "demo-tmux")
        if info is not None:
            subprocess.run(
                [CUCO[0], "-m", "cuco_tui.cli", "stop", "demo-tmux", "--home", str(home)],
                cwd=REPO,
                capture_output=True,
                timeout=120,
            )
            _wait(lambda: not protocol.pid_alive(info.pid), 60)


def test_resume_attach_restarts_a_dead_engine_and_opens_the_tui(tmp_path):
    """`cuco resume RUN --attach` on a run whose engine was killed: a new engine, and the TUI live on it."""
    from cuco_tui.verbs.detached import run_detached
    from engine.config import RunConfig

    home = (tmp_path / "home").resolve()
    run = "demo-resume"
    assert run_detached(home, run, REPO / "workloads" / "demo", RunConfig(max_evals=400), None, attach=False) == 0
    first = protocol.live_run_info(home, run)
    assert first is not None
    os.kill(first.pid, 9)
    assert _wait(lambda: not protocol.pid_alive(first.pid), 20)

    both = subprocess.run(
        [*CUCO, "resume", run, "--attach", "--headless", "--home", str(home)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert both.returncode == 2 and "choose one" in both.stderr, both.stderr

    t = Tmux(tmp_path)
    env = {"TERM": "xterm-256color", "CUCO_HOME": str(home)}
    try:
        t.start(f"{' '.join(CUCO)} resume {run} --attach", env)
        t.wait_live("running", 60)
        second = protocol.live_run_info(home, run)
        assert second is not None and second.pid != first.pid and protocol.pid_alive(second.pid)
    finally:
        t.kill()
        info = protocol.live_run_info(home, run)
        if info is not None:
            subprocess.run([*CUCO, "stop", run, "--home", str(home)], cwd=REPO, capture_output=True, timeout=120)
            _wait(lambda: not protocol.pid_alive(info.pid), 60)
