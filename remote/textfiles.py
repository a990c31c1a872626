"""Reading the user's text files (workload.yaml, cluster.yaml, a run config, sources): a file that cannot
be read, is not UTF-8 or is not YAML is an `InputError` naming it and saying what to do (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import InputError


def read_text(path: Path, field: str = "(file)") -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            str(path), field, f"not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x}): save it as UTF-8"
        ) from None
    except OSError as exc:
        raise InputError(str(path), field, f"cannot read it ({exc.strerror or exc})") from None


def load_yaml(path: Path, field: str = "(file)") -> Any:
    """The YAML document in `path` (None when empty)."""
    text = read_text(path, field)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else field
        raise InputError(str(path), where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
