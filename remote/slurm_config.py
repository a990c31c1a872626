"""A cluster file of `kind: slurm`: jobs go through the cluster's own scheduler (see docs/cluster.md).

Loading validates every field and raises `InputError(file, field, message)` naming the first bad one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .cluster import NodeConfig, YamlReader, cluster_kind, node_config, read_cluster_yaml
from .errors import InputError

TOP_KEYS = {
    "kind",
    "login",
    "ssh_config",
    "known_hosts",
    "connect_timeout_s",
    "keepalive",
    "work_dir",
    "setup",
    "partition",
    "account",
    "qos",
    "constraint",
    "gpus_per_node",
    "gpu_request",
    "extra_sbatch",
    "time_slack_s",
    "build",
    "run",
    "max_jobs",
    "max_attempts",
    "poll",
    "kill_grace_s",
    "limit_wait_s",
}
STAGE_KEYS = {"where", "partition", "account", "qos", "constraint", "extra_sbatch", "time_limit"}
LOGIN_KEYS = {"host", "port", "user", "identity_file", "proxy_jump", "max_connections"}
# A value that reaches an #SBATCH line: no spaces, quotes or shell characters.
WORD_RE = re.compile(r"^[A-Za-z0-9_.,:=+@%/\[\]|&!*()-]+$")


@dataclass(frozen=True)
class StagePlacement:
    """Where one kind of job (build or run) goes and what it asks Slurm for."""

    where: str = "slurm"  # slurm: sbatch; login: on the login node itself (builds only)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    extra_sbatch: tuple[str, ...] = ()  # more `#SBATCH` options, e.g. "--mem=16G"
    time_limit_min: int | None = None  # None: the job's own timeout plus time_slack_s, rounded up
    field: str = ""  # the cluster file's section for this stage (for errors)
    own: frozenset[str] = frozenset()  # the keys set in that section (the rest are the top level's)

    def field_of(self, key: str) -> str:
        """The cluster file's field that gave this stage its `key` (e.g. run.partition or partition)."""
        return f"{self.field}.{key}" if key in self.own else key


@dataclass(frozen=True)
class SlurmClusterConfig:
    path: Path
    login: NodeConfig | None  # None: cuco runs on the login node itself
    work_dir: str  # on the filesystem the login and compute nodes share
    build: StagePlacement
    run: StagePlacement
    setup: tuple[str, ...] = ()
    ssh_config: Path | None = None
    known_hosts: Path | None = None
    connect_timeout_s: float = 15.0
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 4
    gpus_per_node: int | None = None  # None: from `sinfo` (the run partition's GPU GRES)
    gpu_request: str = "gpus"  # gpus: --gpus=N; gres: --gres=gpu:N
    time_slack_s: float = 60.0  # added to a job's timeout for its --time (queue-side setup)
    max_jobs: int = 100  # jobs in flight at once (stay under the cluster's per-user limit)
    max_attempts: int = 3  # a job Slurm loses (NODE_FAIL, PREEMPTED, ...) is submitted again
    # A submission Slurm refuses for the user's job limit waits for cuco's own jobs to end; with none of them
    # in the queue (other jobs fill the limit) it gives up after this long (an environment fault, not the job's).
    limit_wait_s: float = 600.0
    poll_min_s: float = 0.5
    poll_max_s: float = 5.0
    kill_grace_s: float = 2.0
    kind = "slurm"

    def node(self, name: str) -> NodeConfig:
        """The login node, for `cuco nodes trust login --cluster FILE`."""
        if self.login is None or name != self.login.name:
            raise InputError(
                str(self.path),
                "login",
                f"no SSH login node named {name!r} (the login node is "
                f"{'this machine' if self.login is None else repr(self.login.name)})",
            )
        return self.login

    def placement(self, job_kind: str) -> StagePlacement:
        return self.build if job_kind == "build" else self.run


def _words(r: YamlReader, d: dict, key: str, fld: str) -> tuple[str, ...]:
    v = d.get(key, ())
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) and s.strip() for s in v):
        raise r.fail(fld, "must be a list of sbatch options like ['--mem=16G', '--exclusive']")
    out = tuple(s.strip() for s in v)
    for s in out:
        if not s.startswith("-") or "\n" in s:
            raise r.fail(fld, f"{s!r}: each entry is one sbatch option starting with '-' (without #SBATCH)")
    return out


def _word(r: YamlReader, d: dict, key: str, fld: str, default: str | None = None) -> str | None:
    v = r.str_(d, key, fld, default)
    if v is not None and not WORD_RE.match(v):
        raise r.fail(fld, f"must be a single word without spaces or quotes (got {v!r})")
    return v


def _stage(r: YamlReader, raw: Any, name: str, base: StagePlacement) -> StagePlacement:
    d = r.mapping(raw, name, STAGE_KEYS)
    where = d.get("where", base.where)
    if where not in ("slurm", "login") or (where == "login" and name != "build"):
        allowed = "slurm or login" if name == "build" else "slurm"
        raise r.fail(f"{name}.where", f"must be {allowed} (got {where!r})")
    return StagePlacement(
        where=where,
        partition=_word(r, d, "partition", f"{name}.partition", base.partition),
        account=_word(r, d, "account", f"{name}.account", base.account),
        qos=_word(r, d, "qos", f"{name}.qos", base.qos),
        constraint=_word(r, d, "constraint", f"{name}.constraint", base.constraint),
        extra_sbatch=base.extra_sbatch
        + (_words(r, d, "extra_sbatch", f"{name}.extra_sbatch") if "extra_sbatch" in d else ()),
        time_limit_min=r.int_(d, "time_limit", f"{name}.time_limit", 1, default=None),
        field=name,
        own=frozenset(d),
    )


def _setup(r: YamlReader, top: dict) -> tuple[str, ...]:
    v = top.get("setup", ())
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
        raise r.fail("setup", "must be a list of shell lines (e.g. ['module load cuda'])")
    return tuple(v)


def load_slurm_cluster(path: Path) -> SlurmClusterConfig:
    """Read and validate a `kind: slurm` cluster file."""
    path = Path(path)
    r, raw = read_cluster_yaml(path)
    cluster_kind(r, raw, {"slurm"})
    top = r.mapping(raw, "", TOP_KEYS)
    login_raw = top.get("login", "local")
    login: NodeConfig | None = None
    if login_raw != "local":
        if not isinstance(login_raw, dict):
            raise r.fail("login", f"must be 'local' or a mapping with host, port, user, ... (got {login_raw!r})")
        if not login_raw.get("host"):
            raise r.fail("login.host", "is required: the login node's host name, address or ~/.ssh/config alias")
        login = node_config(r, login_raw, 0, {"name": "login"}, where="login", keys=LOGIN_KEYS)
    work_dir = r.str_(top, "work_dir", "work_dir")
    if work_dir is None:
        raise r.fail("work_dir", "is required: a directory on the filesystem the login and compute nodes share")
    if not (work_dir.startswith("/") or work_dir.startswith("~/")):
        raise r.fail("work_dir", f"must be an absolute path or start with ~/ (got {work_dir!r})")
    if not WORD_RE.match(work_dir.replace("~", "")):
        raise r.fail("work_dir", f"must not contain spaces, quotes or newlines (got {work_dir!r})")
    if login is not None:
        login = replace(login, work_dir=work_dir)
    gpn = top.get("gpus_per_node", "auto")
    gpu_request = top.get("gpu_request", "gpus")
    if gpu_request not in ("gpus", "gres"):
        raise r.fail("gpu_request", f"must be gpus (--gpus=N) or gres (--gres=gpu:N) (got {gpu_request!r})")
    base = StagePlacement(
        partition=_word(r, top, "partition", "partition"),
        account=_word(r, top, "account", "account"),
        qos=_word(r, top, "qos", "qos"),
        constraint=_word(r, top, "constraint", "constraint"),
        extra_sbatch=_words(r, top, "extra_sbatch", "extra_sbatch"),
    )
    poll = r.mapping(top.get("poll"), "poll", {"min_s", "max_s"})
    ka = r.mapping(top.get("keepalive"), "keepalive", {"interval", "count_max"})
    cfg = SlurmClusterConfig(
        path=path,
        login=login,
        work_dir=work_dir,
        build=_stage(r, top.get("build"), "build", base),
        run=_stage(r, top.get("run"), "run", base),
        setup=_setup(r, top),
        ssh_config=r.path_(top, "ssh_config", "ssh_config", path.parent),
        known_hosts=r.path_(top, "known_hosts", "known_hosts", path.parent),
        connect_timeout_s=r.num(top, "connect_timeout_s", "connect_timeout_s", 0.1, 15.0),
        keepalive_interval=r.num(ka, "interval", "keepalive.interval", 0.0, 15.0),
        keepalive_count_max=r.int_(ka, "count_max", "keepalive.count_max", 1, default=4),
        gpus_per_node=None if gpn in (None, "auto") else r.int_(top, "gpus_per_node", "gpus_per_node", 0, 1024),
        gpu_request=gpu_request,
        time_slack_s=r.num(top, "time_slack_s", "time_slack_s", 0.0, 60.0),
        max_jobs=r.int_(top, "max_jobs", "max_jobs", 1, 100000, default=100),
        max_attempts=r.int_(top, "max_attempts", "max_attempts", 1, 100, default=3),
        limit_wait_s=r.num(top, "limit_wait_s", "limit_wait_s", 0.0, 600.0),
        poll_min_s=r.num(poll, "min_s", "poll.min_s", 0.05, 0.5),
        poll_max_s=r.num(poll, "max_s", "poll.max_s", 0.05, 5.0),
        kill_grace_s=r.num(top, "kill_grace_s", "kill_grace_s", 0.0, 2.0),
    )
    if cfg.poll_max_s < cfg.poll_min_s:
        raise r.fail("poll.max_s", f"must be >= poll.min_s ({cfg.poll_min_s:g})")
    return cfg
