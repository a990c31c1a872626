"""Every command the TUI suggests works in the run's state. On a finished run (the banner, and `a` / `f` with
no engine, as a browser tab of `cuco serve` shows it too) the suggestions are to accept from a shell and then
fork with --start, never `cuco resume` (which refuses a finished run); on a stopped run it is `cuco resume`.
Each suggested command is run as printed, and must do what it says."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import time

import pytest

from cuco_tui.app import CucoApp
from cuco_tui.settings import TuiSettings
from cuco_tui.widgets.candidates import CandidatesTable
from engine.daemon import protocol
from tests.chaos.chaos import cuco, query, start
from tests.tui.waiting import until

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

COMMAND = re.compile(r"cuco [a-z]+ [^;()]*?(?=;|$|\)|, then)")


def _commands(text: str) -> list[str]:
    return [c.strip() for c in COMMAND.findall(" ".join(text.split()))]


def _run_suggested(home, command: str, candidate: int) -> subprocess.CompletedProcess:
    """The command as suggested, its placeholders filled: ID with `candidate`, TEXT with a note."""
    words = command.split()[1:]
    words = [str(candidate) if w == "ID" else ("looked at it" if w == "TEXT" else w) for w in words]
    return cuco(home, *words)


async def _told(home, run: str, keys: list[str]) -> tuple[str, list[str]]:
    """The banner of the TUI opened read-only on `run`, and what each key (with the first candidate
    selected) is answered."""
    app = CucoApp(home, run, settings=TuiSettings(theme="cuco-dark"))
    async with app.run_test(size=(200, 30)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count > 0 and bool(app.summary.state), 20)
        await pilot.pause(0.3)
        banner = str(app.query_one("#banner").render())
        table.focus()
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.2)
        said = [str(n.message) for n in app._notifications]
    return banner, said


async def test_a_finished_runs_suggestions_accept_then_fork(tmp_path):
    home = tmp_path / "home"
    done = cuco(home, "run", "demo", "--headless", "--max-evals", "3", "--name", "fin", timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    db = home / "cuco.db"
    (flagged,) = query(db, "SELECT MAX(id) FROM candidates WHERE run_id='fin' AND status='done'")[0]
    conn = sqlite3.connect(db)  # a result held for review, as a flagged benchmark leaves it
    with conn:
        conn.execute("UPDATE candidates SET review='needs_review' WHERE id=?", (flagged,))
    conn.close()

    banner, said = await _told(home, "fin", ["v", "a", "x"])  # the review queue's accept and reject
    assert "finished" in banner and "cuco resume" not in banner, banner
    suggested = _commands(banner) + [c for line in said for c in _commands(line)]
    assert not [c for c in suggested if c.startswith("cuco resume")], suggested
    by_verb: dict[str, list[str]] = {}
    for command in suggested:
        by_verb.setdefault(command.split()[1], []).append(command)
    assert set(by_verb) == {"accept", "fork", "reject"}, suggested
    assert cuco(home, "resume", "fin").returncode == 1  # what the old advice said: refused

    for command in by_verb["accept"]:  # from the banner (ID) and from the review queue's `a`
        ran = _run_suggested(home, command, flagged)
        assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
    assert json.loads(cuco(home, "report", "fin", "--json").stdout)["accepted"] == [flagged]
    (fork,) = by_verb["fork"]
    before = {r for (r,) in query(db, "SELECT id FROM runs")}
    ran = _run_suggested(home, fork, flagged)
    assert ran.returncode == 0, (fork, ran.stdout, ran.stderr)
    (new_run,) = {r for (r,) in query(db, "SELECT id FROM runs")} - before
    assert until_live(home, new_run), f"the fork {new_run} did not start"
    assert cuco(home, "stop", new_run).returncode == 0
    (reject,) = by_verb["reject"]
    ran = _run_suggested(home, reject, flagged)
    assert ran.returncode == 0, (reject, ran.stdout, ran.stderr)
    assert [r["candidate"] for r in json.loads(cuco(home, "report", "fin", "--json").stdout)["rejected"]] == [flagged]


def until_live(home, run: str) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if protocol.live_run_info(home, run) is not None:
            return True
        time.sleep(0.2)
    return False


async def test_a_stopped_runs_suggestion_resumes_it(tmp_path):
    home = tmp_path / "home"
    proc = start(home, "run", "demo", "--headless", "--max-evals", "40", "--name", "halt")
    assert until_live(home, "halt")
    stopped = cuco(home, "stop", "halt")
    assert stopped.returncode == 0, stopped.stderr
    proc.wait(60)
    proc.stderr.close()
    banner, said = await _told(home, "halt", ["space"])
    suggested = _commands(banner) + [c for line in said for c in _commands(line)]
    assert suggested and all(c == "cuco resume halt" for c in suggested), (banner, said)
    ran = cuco(home, "resume", "halt")
    assert ran.returncode == 0, ran.stderr
    assert until_live(home, "halt")
    assert cuco(home, "stop", "halt").returncode == 0
