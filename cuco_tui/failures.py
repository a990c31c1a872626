"""What the `cuco` command says when the store, the disk or the terminal fails under a verb.

One line naming the file and what to do, and an exit status that is not a success, instead of a
traceback: a damaged or locked store, a full or read-only disk under the project home. A reader that
closes the pipe (`cuco ls | head`) ends the command quietly.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import sys
from pathlib import Path

from engine.store.store import DB_NAME
from engine.store.store_check import not_usable

EXIT_FAILED, EXIT_BAD_INPUT = 1, 2
EXIT_PIPE_CLOSED = 128 + 13  # as a shell reports a command ended by SIGPIPE

NOTHING_WRITTEN = "what this command was to write was not written"
DISK_ERRNOS = {errno.ENOSPC: "full", errno.EDQUOT: "over its quota", errno.EROFS: "read-only", errno.EACCES: None}


def store_failure(exc: BaseException, home: Path) -> tuple[str, int] | None:
    """The line to print and the exit status for a fault of the store or the disk under `home`; None when
    `exc` is neither (a bug, which keeps its traceback)."""
    db = Path(home) / DB_NAME
    if isinstance(exc, sqlite3.Error):
        known = not_usable(db, exc)
        if known is not None:
            return f"cuco: {known}", EXIT_BAD_INPUT
        return (
            f"cuco: {db}: (store): {exc}; {NOTHING_WRITTEN}: check the disk and the file (`cuco ls` reads it), "
            "then run the command again",
            EXIT_FAILED,
        )
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        where = exc.filename or home
        what = DISK_ERRNOS[exc.errno]
        if what is None:  # EACCES: a read as likely as a write
            return f"cuco: {where}: permission denied: make it readable and writable for this user", EXIT_FAILED
        todo = "free space on it" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "make it writable"
        return (
            f"cuco: {where}: the disk is {what} ({exc.strerror}); {NOTHING_WRITTEN}: {todo}, or pass another --home",
            EXIT_FAILED,
        )
    return None


def quiet_closed_pipe() -> int:
    """stdout's reader went away: point stdout at /dev/null, so the interpreter's final flush cannot
    raise again, and end with the status a shell gives a command ended by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind stdout (a test's stand-in): nothing to flush
        pass
    return EXIT_PIPE_CLOSED
