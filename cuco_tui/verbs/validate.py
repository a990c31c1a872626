"""`cuco validate WORKLOAD [--no-compile] [--seed-only]`: check a workload, and compile (and verify, on
GPUs) it where the toolchain is present (cuco_tui/validate.py does the checking)."""

from __future__ import annotations

import argparse
from typing import Any

from ..validate import validate_workload
from .common import add_verb


def cmd_validate(args: argparse.Namespace) -> int:
    return validate_workload(args.workload, compile_=not args.no_compile, seed_only=args.seed_only)


def register(subparsers: Any) -> None:
    p = add_verb(subparsers, "validate", cmd_validate, "check a workload and compile it where the toolchain is present")
    p.add_argument("workload", metavar="WORKLOAD")
    p.add_argument("--no-compile", action="store_true", help="check the spec and blocks only")
    p.add_argument("--seed-only", action="store_true", help="compile (and verify, on GPUs) the seed alone")
