"""Run ids: a name the user gave, or `<workload>-<n>`; unique within a project home."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from remote.errors import InputError

from .store import DB_NAME
from .store_check import check_store_file, connect_for_reading

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def existing_run_ids(home: Path) -> set[str]:
    db = Path(home) / DB_NAME
    if not db.exists():
        return set()
    check_store_file(db)
    conn = connect_for_reading(db, 30)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM runs")}
    except sqlite3.OperationalError:
        return set()
    finally:
        conn.close()


def new_run_id(home: Path, workload_name: str, name: str | None) -> str:
    taken = existing_run_ids(home)
    if name:
        if not NAME_RE.match(name):
            raise InputError("--name", "name", f"{name!r} must be letters, digits, '.', '_' or '-' (at most 64)")
        if name in taken:
            raise InputError("--name", "name", f"a run named {name!r} already exists (see `cuco ls`)")
        return name
    n = 1
    while f"{workload_name}-{n}" in taken:
        n += 1
    return f"{workload_name}-{n}"
