"""What the TUI tells a user to type when its run has no live engine: one place, so every banner and
message gives a command that works in the run's state.

`cuco resume` restarts any run but a finished one (it refuses: a finished run reached its end); to search on
from a finished run, what should count is accepted first (`cuco accept`, which writes the store with no
engine), then a fork starts from its best (`cuco fork RUN --start`). Accepting and rejecting never need an
engine: from a shell they write the store.
"""

from __future__ import annotations

import shlex

FINISHED = "finished"


def resume_or_fork(run_id: str, state: str | None) -> str:
    """How to search on from the run, in its state."""
    run = shlex.quote(run_id)
    if state == FINISHED:
        return f"to search on, accept what should count (cuco accept {run} ID), then fork it: cuco fork {run} --start"
    return f"restart it: cuco resume {run}"


def read_only_banner(run_id: str, state: str | None) -> str:
    """The banner of a TUI opened on a run with no live engine."""
    if state == FINISHED:
        return f"read-only: the run has finished; {resume_or_fork(run_id, state)}"
    return f"read-only: no live engine; {resume_or_fork(run_id, state)}"


def ended_banner(run_id: str, state: str, reason: str) -> str:
    """The banner once the engine said the run ended (its last word)."""
    told = f"the run {state}" + (f": {reason}" if reason else "")
    return f"{told}; its engine has ended (the store is open read-only); {resume_or_fork(run_id, state)}"


def accept_command(run_id: str, candidate: int) -> str:
    return f"cuco accept {shlex.quote(run_id)} {candidate} --note TEXT"


def reject_command(run_id: str, candidate: int) -> str:
    return f"cuco reject {shlex.quote(run_id)} {candidate} --reason TEXT"


def fork_command(run_id: str, candidate: int | None) -> str:
    start = f" --from {candidate}" if candidate is not None else ""
    return f"cuco fork {shlex.quote(run_id)}{start} --start"


def without_engine(what: str, run_id: str, state: str | None, ended: bool = False, shell: str | None = None) -> str:
    """A control that needs the engine, asked of a TUI without one: the shell command that does it now
    (`shell`: accept, reject and fork write the store themselves), else how to search on."""
    if ended:
        head = f"{what}: the run {state}; its engine has ended"
    elif state == FINISHED:
        head = f"{what}: the run has finished (read-only)"
    else:
        head = f"{what}: no live engine (read-only)"
    return f"{head}; " + (f"from a shell: {shell}" if shell else resume_or_fork(run_id, state))
