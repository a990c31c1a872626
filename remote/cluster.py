"""`cluster.yaml`: the GPU nodes the SSH executor dispatches to (see docs/cluster.md).

Loading validates every field and raises `InputError(file, field, message)` naming the first bad one.
A file's `kind` (ssh, the default, or slurm) picks its executor: see `remote.registry`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .textfiles import load_yaml

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

NODE_KEYS = {
    "name",
    "host",
    "port",
    "user",
    "identity_file",
    "proxy_jump",
    "gpus",
    "cpu_slots",
    "work_dir",
    "setup",
    "max_connections",
}
TOP_KEYS = {
    "nodes",
    "defaults",
    "ssh_config",
    "known_hosts",
    "max_attempts",
    "quarantine",
    "keepalive",
    "connect_timeout_s",
    "kill_grace_s",
}


@dataclass(frozen=True)
class NodeConfig:
    name: str
    host: str
    port: int | None = None  # None: from ~/.ssh/config, else 22
    user: str | None = None  # None: from ~/.ssh/config, else the local user
    identity_file: str | None = None  # None: ~/.ssh/config, the agent, ~/.ssh/id_*
    proxy_jump: str | None = None  # a [user@]host[:port] or a Host alias; None: ~/.ssh/config
    gpus: tuple[int, ...] | None = None  # None: "auto" (nvidia-smi on the node)
    cpu_slots: int | None = None  # None: "auto" (nproc on the node)
    work_dir: str = "~/.cuco-work"
    setup: tuple[str, ...] = ()
    max_connections: int = 8


@dataclass(frozen=True)
class QuarantinePolicy:
    failures: int = 3  # this many node failures ...
    window_s: float = 300.0  # ... within this window quarantine the node ...
    duration_s: float = 900.0  # ... for this long (0: for the rest of the run)


@dataclass(frozen=True)
class ClusterConfig:
    path: Path
    nodes: tuple[NodeConfig, ...]
    kind = "ssh"
    ssh_config: Path | None = None  # None: ~/.ssh/config when it exists
    known_hosts: Path | None = None  # None: <home>/known_hosts
    max_attempts: int = 3
    quarantine: QuarantinePolicy = field(default_factory=QuarantinePolicy)
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 4
    connect_timeout_s: float = 15.0
    kill_grace_s: float = 2.0

    def node(self, name: str) -> NodeConfig:
        for n in self.nodes:
            if n.name == name:
                return n
        names = ", ".join(n.name for n in self.nodes)
        raise InputError(str(self.path), "nodes", f"no node named {name!r} (nodes: {names})")


class YamlReader:
    """Typed reads of one cluster file's values; every error names the file and the field."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, fld: str, msg: str) -> InputError:
        return InputError(self.file, fld, msg)

    def int_(self, d: dict, key: str, fld: str, lo: int, hi: int | None = None, default: Any = None) -> Any:
        if key not in d or d[key] is None:
            return default
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
            rng = f"{lo}-{hi}" if hi is not None else f">= {lo}"
            raise self.fail(fld, f"must be an integer {rng} (got {v!r})")
        return v

    def num(self, d: dict, key: str, fld: str, lo: float, default: float) -> float:
        if key not in d or d[key] is None:
            return default
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < lo:
            raise self.fail(fld, f"must be a number >= {lo:g} (got {v!r})")
        return float(v)

    def str_(self, d: dict, key: str, fld: str, default: Any = None) -> Any:
        if key not in d or d[key] is None:
            return default
        v = d[key]
        if not isinstance(v, str) or not v.strip():
            raise self.fail(fld, f"must be a non-empty string (got {v!r})")
        return v.strip()

    def path_(self, d: dict, key: str, fld: str, base: Path) -> Path | None:
        """A local file path: ~ expanded, relative to the cluster file's folder."""
        v = self.str_(d, key, fld)
        if v is None:
            return None
        p = Path(v).expanduser()
        return p if p.is_absolute() else base / p

    def mapping(self, v: Any, fld: str, allowed: set[str]) -> dict:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self.fail(fld, f"must be a mapping (got {type(v).__name__})")
        for k in v:
            if k not in allowed:
                raise self.fail(
                    f"{fld}.{k}" if fld else str(k), f"unknown field (expected one of: {', '.join(sorted(allowed))})"
                )
        return v


def node_config(
    r: YamlReader, raw: Any, i: int, defaults: dict, where: str = "", keys: set[str] = NODE_KEYS
) -> NodeConfig:
    """One node's fields; `where` names it in errors (default nodes[i])."""
    where = where or f"nodes[{i}]"
    d = dict(defaults)
    d.update(r.mapping(raw, where, keys))

    def f(key: str) -> str:
        return f"{where}.{key}"

    name = r.str_(d, "name", f("name"))
    if name is None:
        raise r.fail(f("name"), "is required")
    if not NAME_RE.match(name):
        raise r.fail(f("name"), f"must be letters, digits, '_', '.' or '-' (got {name!r})")
    host = r.str_(d, "host", f("host"), default=name)
    port = r.int_(d, "port", f("port"), 1, 65535)
    gpus_raw = d.get("gpus", "auto")
    gpus: tuple[int, ...] | None
    if gpus_raw is None or gpus_raw == "auto":
        gpus = None
    elif isinstance(gpus_raw, list) and all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus_raw
    ):
        if len(set(gpus_raw)) != len(gpus_raw):
            raise r.fail(f("gpus"), f"lists a GPU twice: {gpus_raw}")
        gpus = tuple(gpus_raw)
    else:
        raise r.fail(f("gpus"), f"must be 'auto' or a list of GPU indices like [0, 1] (got {gpus_raw!r})")
    cpu_raw = d.get("cpu_slots", "auto")
    cpu_slots = None if cpu_raw in (None, "auto") else r.int_(d, "cpu_slots", f("cpu_slots"), 1)
    setup_raw = d.get("setup", ())
    if isinstance(setup_raw, str):
        setup_raw = [setup_raw]
    if not isinstance(setup_raw, (list, tuple)) or not all(isinstance(s, str) for s in setup_raw):
        raise r.fail(f("setup"), "must be a list of shell lines (e.g. ['module load cuda'])")
    work_dir = r.str_(d, "work_dir", f("work_dir"), default="~/.cuco-work")
    if not (work_dir.startswith("/") or work_dir == "~" or work_dir.startswith("~/")):
        raise r.fail(f("work_dir"), f"must be an absolute path or start with ~/ (got {work_dir!r})")
    if "'" in work_dir or "\n" in work_dir:
        raise r.fail(f("work_dir"), "must not contain quotes or newlines")
    return NodeConfig(
        name=name,
        host=host,
        port=port,
        user=r.str_(d, "user", f("user")),
        identity_file=r.str_(d, "identity_file", f("identity_file")),
        proxy_jump=r.str_(d, "proxy_jump", f("proxy_jump")),
        gpus=gpus,
        cpu_slots=cpu_slots,
        work_dir=work_dir,
        setup=tuple(setup_raw),
        max_connections=r.int_(d, "max_connections", f("max_connections"), 1, 64, default=8),
    )


def read_cluster_yaml(path: Path) -> tuple[YamlReader, Any]:
    """The parsed YAML of a cluster file (any kind), or an `InputError` naming the file (and line)."""
    path = Path(path)
    file = str(path)
    return YamlReader(file), load_yaml(path)  # unreadable, not UTF-8, not YAML: an InputError naming it


def cluster_kind(r: YamlReader, raw: Any, kinds: Any) -> str:
    """The file's `kind` (default ssh), checked against the kinds there are."""
    kind = raw.get("kind", "ssh") if isinstance(raw, dict) else "ssh"
    if kind not in kinds:
        raise r.fail("kind", f"must be one of: {', '.join(sorted(kinds))} (got {kind!r})")
    return kind


def load_cluster(path: Path) -> ClusterConfig:
    """Read and validate an SSH cluster file; every problem is an `InputError` naming the file and field."""
    path = Path(path)
    r, raw = read_cluster_yaml(path)
    cluster_kind(r, raw, {"ssh"})
    top = r.mapping(raw, "", TOP_KEYS)
    if not top:
        raise r.fail("nodes", "is required: a list of nodes (see docs/cluster.md)")
    nodes_raw = top.get("nodes")
    if not isinstance(nodes_raw, list) or not nodes_raw:
        raise r.fail("nodes", "must be a non-empty list of nodes")
    defaults = r.mapping(top.get("defaults"), "defaults", NODE_KEYS - {"name", "host"})
    nodes = tuple(node_config(r, n, i, defaults) for i, n in enumerate(nodes_raw))
    seen: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.name in seen:
            raise r.fail(f"nodes[{i}].name", f"{n.name!r} is already used by nodes[{seen[n.name]}]")
        seen[n.name] = i
    q = r.mapping(top.get("quarantine"), "quarantine", {"failures", "window_s", "duration_s"})
    ka = r.mapping(top.get("keepalive"), "keepalive", {"interval", "count_max"})
    return ClusterConfig(
        path=path,
        nodes=nodes,
        ssh_config=r.path_(top, "ssh_config", "ssh_config", path.parent),
        known_hosts=r.path_(top, "known_hosts", "known_hosts", path.parent),
        max_attempts=r.int_(top, "max_attempts", "max_attempts", 1, 100, default=3),
        quarantine=QuarantinePolicy(
            failures=r.int_(q, "failures", "quarantine.failures", 1, default=3),
            window_s=r.num(q, "window_s", "quarantine.window_s", 0.001, 300.0),
            duration_s=r.num(q, "duration_s", "quarantine.duration_s", 0.0, 900.0),
        ),
        keepalive_interval=r.num(ka, "interval", "keepalive.interval", 0.0, 15.0),
        keepalive_count_max=r.int_(ka, "count_max", "keepalive.count_max", 1, default=4),
        connect_timeout_s=r.num(top, "connect_timeout_s", "connect_timeout_s", 0.1, 15.0),
        kill_grace_s=r.num(top, "kill_grace_s", "kill_grace_s", 0.0, 2.0),
    )
