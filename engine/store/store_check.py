"""Is `cuco.db` a store this cuco can use? Says so before anything reads or writes it.

A garbage file, someone else's SQLite database, a store from a newer cuco, or one another process holds
locked each end in an `InputError` naming the file and what to do (the CLI exits 2), never a traceback.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from remote.errors import InputError

from .schema import SCHEMA_VERSION

PROBE_TIMEOUT_S = 5.0
PROBE_RETRIES = 3  # "disk I/O error": a read-only open as the last writer closed (its WAL files went)


def _error(db_path: Path, message: str) -> InputError:
    return InputError(str(db_path), "(store)", message)


def not_usable(db_path: Path, exc: BaseException) -> InputError | None:
    """The InputError for a store SQLite refused to open or read (None: not a problem with the file)."""
    text = str(exc)
    # garbage inside a row's text passes SQLite's structural check and fails only when the row is read
    garbled = "Could not decode to UTF-8" in text
    if isinstance(exc, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text or garbled):
        return _error(
            db_path,
            "not a cuco database, or a damaged one: move it aside (`mv cuco.db cuco.db.bad`) "
            "and run again, or pass another --home",
        )
    if isinstance(exc, sqlite3.OperationalError) and ("full" in text or _no_space(db_path)):
        return _error(
            db_path,
            f"the disk is full ({text}): nothing was written; free space on it, then run the command again",
        )
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return _error(
            db_path,
            "locked by another process (another cuco engine, or a program holding it open): "
            "wait for it to end or stop it (`cuco ls` shows the runs), then try again",
        )
    if isinstance(exc, sqlite3.OperationalError) and ("unable to open" in text or "readonly" in text):
        if _read_only_disk(db_path):
            return _error(
                db_path,
                f"on a read-only file system ({text}): nothing can be written there; remount it read-write, "
                "or copy the home elsewhere and pass --home",
            )
        return _error(db_path, f"cannot be opened ({text}): check the permissions of the file and its folder")
    return None


def _no_space(db_path: Path) -> bool:
    try:
        return os.statvfs(db_path.parent).f_bavail == 0
    except OSError:
        return False


def _read_only_disk(db_path: Path) -> bool:
    try:
        return bool(os.statvfs(db_path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect_for_reading(db_path: Path, timeout: float, check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection that cannot write the database (mode=ro). Not read-write with `query_only`: such a
    connection, closing last, may remove the WAL it could not checkpoint, and commits still in it with it."""
    return sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=timeout, check_same_thread=check_same_thread)


def _probe(db_path: Path) -> tuple[set[str], Any]:
    conn = connect_for_reading(db_path, PROBE_TIMEOUT_S)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() if "meta" in tables else None
    finally:
        conn.close()
    return tables, row


def check_store_file(db_path: Path) -> bool:
    """Raise InputError when the file at `db_path` (if any) is not a cuco store this version can use.
    Returns whether it holds one (False: no file, or an empty one that a writer makes a store of)."""
    db_path = Path(db_path)
    if not db_path.exists():
        return False
    # SQLite itself reads the header (garbage: "file is not a database"): a plain open() and close() of the
    # file would drop every POSIX lock this process's connections hold on it, and another process closing
    # its last connection would then take the database for unused and delete the WAL under them.
    for attempt in range(PROBE_RETRIES + 1):
        try:
            tables, row = _probe(db_path)
            break
        except sqlite3.OperationalError as exc:
            if "disk I/O error" in str(exc) and attempt < PROBE_RETRIES:
                time.sleep(0.05 * (attempt + 1))  # a writer closing as this opened: read again
                continue
            raise (not_usable(db_path, exc) or _error(db_path, f"cannot be read: {exc}")) from None
        except sqlite3.Error as exc:
            raise (not_usable(db_path, exc) or _error(db_path, f"cannot be read: {exc}")) from None
    if tables and ("meta" not in tables or "runs" not in tables):
        raise _error(
            db_path,
            "an SQLite database that is not cuco's (no runs or schema version in it): "
            "pass another --home, or move it aside",
        )
    version = int(row[0]) if row and str(row[0]).isdigit() else 0
    if version > SCHEMA_VERSION:
        raise _error(
            db_path,
            f"written by a newer cuco (store schema v{version}; this cuco reads up to "
            f"v{SCHEMA_VERSION}): upgrade cuco (`pip install -U cuco`), or pass another --home",
        )
    return bool(tables)


def empty_store(db_path: Path) -> InputError:
    """What a reader says of a store file with nothing in it (a first writer stopped while making it)."""
    return _error(
        db_path,
        "an empty file, not a cuco store yet: start a run in it (`cuco run WORKLOAD`), or remove it, "
        "or pass another --home",
    )


def damaged(db_path: Path, detail: str) -> InputError:
    """A store whose pages SQLite's integrity check refuses."""
    return _error(
        db_path,
        f"damaged ({' '.join(detail.split())}): nothing was written to it; move it aside (`mv cuco.db cuco.db.bad`) and run "
        "again, or pass another --home",
    )
