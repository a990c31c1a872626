"""Every verb of `cuco`, in the order `cuco --help` lists them: each module's `register(subparsers)` adds its
verbs, each with a `func` that takes the parsed arguments and returns the exit code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import control, nodes, onboard, profile, report, rewrite, run, serve, transform, validate

REGISTER: tuple[Callable[[Any], None], ...] = (
    run.register,  # run, resume
    report.register,  # ls, report, export
    validate.register,
    control.register,  # attach, pause, stop, accept, reject, strategy, fork
    nodes.register,  # nodes check, nodes trust
    transform.register,
    onboard.register,  # analyze, init
    rewrite.register,
    profile.register,
    serve.register,
)
