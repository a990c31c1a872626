"""A store that fails under a verb: empty, damaged where SQLite only notices on a full read, on a disk that
filled up or went read-only, or locked by another program. Each verb says so in one line naming the file and what to do, exits non-zero,
and a write that did not land is never reported done. And a reader that closes the pipe (`cuco ... | head`)
ends the command quietly."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.chaos import CLI, cuco, cuco_env

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A home with one finished demo run ('a', three candidates), copied by each test."""
    home = tmp_path_factory.mktemp("store") / "home"
    done = cuco(home, "run", "demo", "--headless", "--max-evals", "3", "--name", "a", timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return home


def copy_home(finished: Path, to: Path) -> Path:
    shutil.copytree(finished, to, ignore=shutil.ignore_patterns("cuco.db-*"))
    return to


def candidate_ids(home: Path) -> list[int]:
    conn = sqlite3.connect(home / "cuco.db")
    try:
        return [r[0] for r in conn.execute("SELECT id FROM candidates WHERE run_id='a' ORDER BY id")]
    finally:
        conn.close()


def decisions(home: Path) -> tuple[list, list]:
    data = json.loads(cuco(home, "report", "a", "--json").stdout)
    return data["accepted"], data["rejected"]


def one_line(proc: subprocess.CompletedProcess, db: Path, *fragments: str) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(db) in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "done" not in proc.stdout, proc.stdout
    return lines[0]


def test_an_empty_store_file_is_named_not_a_traceback(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "cuco.db"
    db.touch()
    for verb in (("ls",), ("report", "a"), ("accept", "a", "1"), ("resume", "a", "--headless")):
        one_line(cuco(home, *verb), db, "an empty file", "cuco run WORKLOAD")
    assert db.stat().st_size == 0


def test_a_store_damaged_past_its_header_refuses_a_write(finished: Path, tmp_path: Path):
    home = copy_home(finished, tmp_path / "home")
    db = home / "cuco.db"
    first = candidate_ids(home)[0]
    size = db.stat().st_size
    # garbage over the b-tree header of every other page but the first: the file header and schema still
    # read, the pages' structure does not (garbage inside a row's text alone is data SQLite cannot tell from
    # any other, and is refused when that row is read)
    with open(db, "r+b") as f:
        for offset in range(8192, size, 8192):
            f.seek(offset)
            f.write(os.urandom(300))
    before = db.read_bytes()
    for verb in (("accept", "a", str(first), "--note", "fine"), ("resume", "a", "--headless")):
        line = one_line(cuco(home, *verb), db, "move it aside")
        assert "damaged" in line or "not a cuco database" in line, line
    assert db.read_bytes() == before, "the damaged store was written"


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 4 MB tmpfs (CI runs as root); skipped, with the reason, where mount fails."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {mount.stderr.strip() or 'not root'}")
    try:
        yield mnt
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], capture_output=True)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_fails_the_write_and_says_so(finished: Path, small_disk: Path):
    home = copy_home(finished, small_disk / "home")
    db = home / "cuco.db"
    first, *rest = candidate_ids(home)
    with open(small_disk / "filler", "wb") as f:  # fill the disk to its last byte
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    one_line(cuco(home, "accept", "a", str(first), "--note", "fine"), db, "disk is full", "free space")
    one_line(cuco(home, "reject", "a", str(rest[-1]), "--reason", "wrong"), db, "disk is full")
    (small_disk / "filler").unlink()
    assert decisions(home) == ([], []), "a write reported failed landed after all"
    done = cuco(home, "accept", "a", str(first), "--note", "fine")  # space is back: the same verb works
    assert done.returncode == 0, done.stderr
    assert decisions(home)[0] == [first]


def test_a_read_only_disk_fails_the_write_and_says_so(finished: Path, small_disk: Path):
    home = copy_home(finished, small_disk / "home")
    db = home / "cuco.db"
    first = candidate_ids(home)[0]
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    one_line(cuco(home, "accept", "a", str(first), "--note", "fine"), db, "read-only file system", "read-write")
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert decisions(home) == ([], [])


@pytest.mark.parametrize("verb", [("ls",), ("ls", "--json"), ("report", "a"), ("report", "a", "--json")])
def test_a_closed_pipe_ends_the_command_quietly(finished: Path, verb: tuple[str, ...]):
    """`cuco ... | head`: the reader is gone before cuco writes; nothing on stderr, and not a success."""
    proc = subprocess.Popen(
        [*CLI, "--home", str(finished), *verb],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=cuco_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(60)
    assert err == "", err
    assert proc.returncode != 0


def test_a_locked_store_names_the_lock_for_reads_and_writes(finished: Path, tmp_path: Path):
    home = copy_home(finished, tmp_path / "home")
    db = home / "cuco.db"
    first = candidate_ids(home)[0]
    holder = subprocess.Popen(  # another program holds it locked (a rollback-journal writer blocks readers too)
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('PRAGMA journal_mode=DELETE'); c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); "
            "time.sleep(120)",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for verb in (("ls",), ("accept", "a", str(first), "--note", "fine")):
            one_line(cuco(home, *verb), db, "locked by another process")
    finally:
        holder.kill()
        holder.wait(10)
    assert decisions(home) == ([], [])
