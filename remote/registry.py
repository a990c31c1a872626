"""Which executor serves a cluster file: its `kind` (ssh, the default, or slurm) names the module.

Every executor module listed here exposes
    load_config(path) -> its config        (InputError naming the file and field on a bad file)
    from_config(config, home) -> Executor  (not started yet)
so `cluster.py` never imports an executor, and a new kind is one new module plus one line in KINDS.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .cluster import cluster_kind, read_cluster_yaml
from .jobs import Executor

KINDS = MappingProxyType(
    {
        "ssh": "remote.ssh_executor",
        "slurm": "remote.slurm_executor",
    }
)


def _module(path: Path):
    r, raw = read_cluster_yaml(Path(path))
    return importlib.import_module(KINDS[cluster_kind(r, raw, KINDS)])


def load_config(path: Path) -> Any:
    """The validated config of a cluster file of any kind (`.kind` says which)."""
    return _module(path).load_config(Path(path))


def executor_from_config(config: Any, home: Path) -> Executor:
    return importlib.import_module(KINDS[config.kind]).from_config(config, Path(home))


def executor_from_file(path: Path, home: Path) -> Executor:
    """The engine's entry point: an unstarted executor for the cluster in `path`.

    `home` is the project's .cuco directory (its `known_hosts` holds the trusted host keys unless the
    file names another). Call `await executor.start()` before `run`.
    """
    return executor_from_config(load_config(Path(path)), Path(home))
