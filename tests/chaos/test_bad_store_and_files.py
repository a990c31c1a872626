"""A damaged, foreign, newer or locked `cuco.db`, and a workload.yaml / cluster.yaml / run config that is not
UTF-8 or not YAML: every verb that meets one exits 2 with one line naming the file and what to do, and
leaves the file as it was."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.store.store import Store

REPO = Path(__file__).resolve().parents[2]


def cuco(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CUCO_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, file: Path, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(file) in lines[0] or file.name in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def fresh_store(home: Path) -> Path:
    async def make() -> None:
        store = await Store(home).open()
        await store.close()

    asyncio.run(make())
    return home / "cuco.db"


VERBS = [
    ("ls",),
    ("report", "r1", "--json"),
    ("run", "demo", "--headless", "--max-evals", "1", "--name", "r2"),
    ("resume", "r1", "--headless"),
]


def _damaged(home: Path) -> Path:
    home.mkdir()
    db = home / "cuco.db"
    db.write_bytes(os.urandom(4096))
    return db


def _foreign(home: Path) -> Path:
    home.mkdir()
    db = home / "cuco.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
    conn.commit()
    conn.close()
    return db


def _newer(home: Path) -> Path:
    db = fresh_store(home)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    return db


CASES = {
    "damaged": (_damaged, ("not a cuco database", "move it aside")),
    "foreign": (_foreign, ("not cuco's", "another --home")),
    "newer": (_newer, ("newer cuco", "upgrade cuco")),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("verb", VERBS, ids=[v[0] for v in VERBS])
def test_unusable_store_exits_2_naming_it(tmp_path: Path, case: str, verb: tuple[str, ...]):
    make, fragments = CASES[case]
    home = tmp_path / "home"
    db = make(home)
    before = db.read_bytes()
    proc = cuco("--home", str(home), *verb, cwd=tmp_path)
    assert_one_line_error(proc, db, *fragments)
    assert db.read_bytes() == before, "the store was changed"


def test_store_locked_by_another_process_exits_2(tmp_path: Path):
    home = tmp_path / "home"
    db = fresh_store(home)
    # another program holds the database locked (a rollback-journal writer: WAL readers would not be blocked)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
                "c.execute('PRAGMA journal_mode=DELETE'); c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); "
                "time.sleep(120)"
            ),
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        proc = cuco("--home", str(home), "run", "demo", "--headless", "--max-evals", "1", cwd=tmp_path)
        assert_one_line_error(proc, db, "locked by another process")
        assert time.monotonic() - started < 60
    finally:
        holder.kill()
        holder.wait(10)


NOT_UTF8 = b"name: demo\ndescription: caf\xe9 \xff\xfe\n"
NOT_YAML = b"nodes: [a, b\n  - {host: \n"


@pytest.mark.parametrize(
    "content,fragment", [(NOT_UTF8, "not UTF-8"), (NOT_YAML, "not valid YAML")], ids=["not-utf8", "not-yaml"]
)
def test_undecodable_cluster_and_config_files_exit_2(tmp_path: Path, content: bytes, fragment: str):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    home = tmp_path / "home"
    for flag in ("--cluster", "--config"):
        proc = cuco("--home", str(home), "run", "demo", "--headless", "--max-evals", "1", flag, str(bad), cwd=tmp_path)
        assert_one_line_error(proc, bad, fragment)
    proc = cuco("nodes", "check", str(bad), cwd=tmp_path)
    assert_one_line_error(proc, bad, fragment)
    assert not (home / "cuco.db").exists(), "a run was started"


@pytest.mark.parametrize(
    "content,fragment",
    [(NOT_UTF8, "not UTF-8"), (NOT_YAML, "not valid YAML"), (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8")],
    ids=["not-utf8", "not-yaml", "binary"],
)
def test_undecodable_workload_yaml_exits_2(demo_copy: Path, tmp_path: Path, content: bytes, fragment: str):
    yaml_file = demo_copy / "workload.yaml"
    yaml_file.write_bytes(content)
    for verb in (("run", str(demo_copy), "--headless", "--max-evals", "1"), ("validate", str(demo_copy))):
        proc = cuco("--home", str(tmp_path / "home"), *verb, cwd=tmp_path)
        assert_one_line_error(proc, yaml_file, fragment)


def test_candidate_source_not_utf8_exits_2(demo_copy: Path, tmp_path: Path):
    import yaml

    candidate = demo_copy / yaml.safe_load((demo_copy / "workload.yaml").read_text())["candidate"]
    candidate.write_bytes(candidate.read_bytes() + b"\n// \xff\xfe\n")
    proc = cuco("--home", str(tmp_path / "home"), "run", str(demo_copy), "--headless", "--max-evals", "1", cwd=tmp_path)
    assert_one_line_error(proc, candidate, "not UTF-8")
