"""The `cuco` command line (README.md lists the verbs). Exit codes: 0 done, 1 the run failed, 2 bad input."""

from __future__ import annotations

import argparse
import sqlite3
import sys

from engine.llm.keys import hold_keys
from remote.errors import InputError
from remote.jobs import NoUsableNode

from .failures import quiet_closed_pipe, store_failure
from .processes import honour_signals
from .verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, home_from
from .verbs.registry import REGISTER


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuco",
        description="co-design computation and communication of multi-GPU CUDA programs by evolutionary search",
    )
    parser.add_argument("--home", help="project home (default: $CUCO_HOME or ./.cuco)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in REGISTER:
        register(sub)
    for verb in sub.choices.values():  # the global --home also works after the verb
        try:
            verb.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
        except argparse.ArgumentError:
            pass  # the verb has a --home of its own
    return parser


def main(argv: list[str] | None = None) -> int:
    honour_signals()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NoUsableNode as exc:  # every node refused (host key, auth, down), or none has the GPUs a job needs
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `cuco ls | head`: the reader has what it wanted
        return quiet_closed_pipe()
    except (sqlite3.Error, OSError) as exc:  # the store or the disk under the home failed: one line, no traceback
        said = store_failure(exc, home_from(args))
        if said is None:
            raise
        print(said[0], file=sys.stderr)
        return said[1]


def entry() -> int:
    """The `cuco` command: API keys live in this process's memory from here on, and no child inherits them
    (engine/llm/keys.py); then `main`."""
    hold_keys()
    return main()


if __name__ == "__main__":
    sys.exit(entry())
