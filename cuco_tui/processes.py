"""Processes that end: signals honoured whatever the parent left behind, a child that dies with its parent
(Linux's parent-death signal, set through prctl), and a process group ended politely, then surely."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def honour_signals() -> None:
    """SIGINT and SIGTERM end this process even if the parent ignored them (a background job of a
    non-interactive shell starts with SIGINT ignored, and ignored signals are inherited)."""
    with contextlib.suppress(ValueError, OSError):  # not the main thread: nothing to do
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def parent_death_signal(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A `preexec_fn` that makes the child get `sig` when its parent dies. libc is looked up here, in the
    parent, so the forked child only makes one system call (no loading, no allocation, between fork and exec)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: the signal would never come
            os._exit(1)

    return in_child


def end_groups(pgids: list[int], grace_s: float = 2.0) -> None:
    """SIGTERM to each process group, then SIGKILL to whatever of them is left after `grace_s` (all at once:
    ending several groups takes one grace period, not one each)."""

    def signal_all(sig: int) -> list[int]:
        left = []
        for pgid in pgids:
            try:
                os.killpg(pgid, sig)
                left.append(pgid)
            except ProcessLookupError:
                pass
        return left

    left = signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pgid for pgid in left if _group_alive(pgid)]
    for pgid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
