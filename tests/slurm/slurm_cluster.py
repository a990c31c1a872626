"""A real single-node Slurm on this machine: munged, slurmctld and slurmd on 127.0.0.1, all state in one
temporary folder (used by tests/slurm and tests/bench/bench_slurm.py).

Needs root and Debian's `slurmctld`, `slurmd`, `slurm-client` and `munge`. The node offers 4 GPUs as GPU
GRES: Slurm 22.05 drops GPUs without device files, so each is a symlink to /dev/null (Slurm only counts
them; no job here touches a GPU). Completed jobs stay in `squeue -t all` for MinJobAge, and jobcomp/filetxt
writes one line per finished job to `jobcomp.txt`.

With `accounting=True` (and Debian's `slurmdbd` and `mariadb-server`), the cluster also has Slurm's
accounting: a private mariadbd (its own datadir and socket in the folder, TCP on 127.0.0.1 only), slurmdbd
in front of it, and slurm.conf enforcing associations, limits and QoS, so `sacct` answers and an account
or QoS Slurm does not know is refused. `sacctmgr` sets up: account `cuco` beside root's own, QoS `normal`
(unlimited, the default) and `capped` (per user: CAPPED_SUBMIT jobs queued or running, CAPPED_RUNNING running).
Without accounting `sacct` answers "accounting storage is disabled".
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

BINARIES = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/bin/squeue")
ACCOUNTING_BINARIES = (
    "/usr/sbin/slurmdbd",
    "/usr/sbin/mariadbd",
    "/usr/bin/mariadb-install-db",
    "/usr/bin/mariadb",
    "/usr/bin/sacctmgr",
    "/usr/bin/sacct",
)
GPUS = 4
ACCOUNT = "cuco"  # an account the test users belong to (besides root's default one)
CAPPED_QOS = "capped"  # a QoS with small per-user job limits:
CAPPED_SUBMIT = 3  # ... MaxSubmitJobsPerUser (sbatch refuses a 4th job queued or running)
CAPPED_RUNNING = 1  # ... MaxJobsPerUser (the others pend for QOSMaxJobsPerUserLimit)
# Daemons, stopped in this order (each by the pid file it writes, relative to the cluster's folder).
PIDFILES = ("slurmd.pid", "slurmctld.pid", "slurmdbd.pid", "mysql/mariadbd.pid", "munge/munged.pid")


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (runs munged, slurmctld and slurmd)"
    missing = [b for b in BINARIES if not Path(b).exists()]
    if missing:
        return f"{', '.join(missing)} missing: apt-get install -y slurmctld slurmd slurm-client munge"
    return None


def accounting_skip_reason() -> str | None:
    missing = [b for b in ACCOUNTING_BINARIES if not Path(b).exists()]
    if missing:
        return f"{', '.join(missing)} missing: apt-get install -y slurmdbd mariadb-server"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class SlurmCluster:
    base: Path
    node: str
    env: dict[str, str]  # SLURM_CONF for the client commands
    accounting: bool = False  # slurmdbd (sacct, sacctmgr, enforced accounts and QoS)

    @property
    def conf(self) -> Path:
        return self.base / "slurm.conf"

    def cmd(self, *argv: str, check: bool = True) -> str:
        return subprocess.run(list(argv), env=self.env, check=check, capture_output=True, text=True, timeout=60).stdout

    # ---- daemons -------------------------------------------------------------------------------
    def _start(self, argv: list[str], pidfile: Path) -> None:
        subprocess.run(argv, env=self.env, check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 20
        while _read_pid(pidfile) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} wrote no pid file; see {self.base / 'log'}")
            time.sleep(0.05)

    def _stop(self, pidfile: Path) -> None:
        pid = _read_pid(pidfile)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pidfile.unlink(missing_ok=True)
            return
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
        pidfile.unlink(missing_ok=True)

    def start_munge(self) -> None:
        m = self.base / "munge"
        self._start(
            [
                "/usr/sbin/munged",
                "-f",
                f"--socket={m / 'munge.socket'}",
                f"--key-file={m / 'munge.key'}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={self.base / 'log' / 'munged.log'}",
                f"--seed-file={m / 'seed'}",
            ],
            m / "munged.pid",
        )

    def start_slurmctld(self) -> None:
        self._start(["/usr/sbin/slurmctld", "-f", str(self.conf)], self.base / "slurmctld.pid")

    def start_slurmd(self) -> None:
        self._start(["/usr/sbin/slurmd", "-f", str(self.conf)], self.base / "slurmd.pid")
        self.wait_idle()

    def stop_slurmd(self) -> None:
        self._stop(self.base / "slurmd.pid")

    def wait_idle(self, timeout: float = 60) -> None:
        """Until the node takes jobs (resumed if slurmctld set it down while slurmd was away)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.cmd("sinfo", "-h", "-N", "-o", "%T", check=False).strip().lower()
            if state.startswith(("idle", "mixed", "allocated")):
                return
            if state.startswith(("down", "drain", "inval")):
                self.cmd("scontrol", "update", f"nodename={self.node}", "state=resume", check=False)
            time.sleep(0.2)
        raise RuntimeError(f"node {self.node} never became idle; see {self.base / 'log'}")

    def start_accounting(self, dbd_port: int) -> None:
        """A private mariadbd (datadir and socket in the folder, TCP on 127.0.0.1), the accounting
        database and its user, then slurmdbd with a slurmdbd.conf only root can read (it holds the
        database password)."""
        db = self.base / "mysql"
        subprocess.run(
            [
                "/usr/bin/mariadb-install-db",
                "--no-defaults",
                f"--datadir={db / 'data'}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        port = _free_port()
        # In the background of a shell that exits at once: mariadbd is nobody's child here (no zombie).
        daemon = [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            f"--datadir={db / 'data'}",
            "--user=root",
            "--bind-address=127.0.0.1",
            f"--port={port}",
            f"--socket={db / 'mysqld.sock'}",
            f"--pid-file={db / 'mariadbd.pid'}",
            f"--log-error={self.base / 'log' / 'mariadbd.log'}",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=8M",
        ]
        self._start(["sh", "-c", " ".join(daemon) + " </dev/null >/dev/null 2>&1 &"], db / "mariadbd.pid")
        password = secrets.token_hex(12)
        sql = (
            f"CREATE DATABASE slurm_acct_db; CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )
        deadline = time.monotonic() + 30
        while True:
            out = subprocess.run(
                ["/usr/bin/mariadb", "--no-defaults", f"--socket={db / 'mysqld.sock'}", "-uroot", "-e", sql],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if out.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"mariadbd did not take the accounting database: {out.stderr.strip()}")
            time.sleep(0.1)
        conf = self.base / "slurmdbd.conf"
        conf.write_text(f"""AuthType=auth/munge
AuthInfo=socket={self.base / "munge" / "munge.socket"}
DbdHost={self.node}
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={self.base / "slurmdbd.pid"}
LogFile={self.base / "log" / "slurmdbd.log"}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={port}
StorageUser=slurm
StoragePass={password}
StorageLoc=slurm_acct_db
""")
        os.chmod(conf, 0o600)  # slurmdbd refuses a config others can read; it runs as SlurmUser (root)
        env = dict(self.env, SLURM_CONF=str(self.conf))
        subprocess.run(
            ["/usr/sbin/slurmdbd"], env=dict(env, SLURMDBD_CONF=str(conf)), check=True, capture_output=True, timeout=60
        )
        deadline = time.monotonic() + 30
        while (out := self.sacctmgr("add", "cluster", "cucotest", check=False)).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"slurmdbd never answered ({out.stdout.strip()} {out.stderr.strip()}); "
                    f"see {self.base / 'log' / 'slurmdbd.log'}"
                )
            time.sleep(0.2)
        self.sacctmgr("add", "account", ACCOUNT, "cluster=cucotest", "description=cuco-tests", "organization=cuco")
        self.sacctmgr(
            "add", "qos", CAPPED_QOS, f"maxsubmitjobsperuser={CAPPED_SUBMIT}", f"maxjobsperuser={CAPPED_RUNNING}"
        )
        self.associate("root")

    def sacctmgr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(["sacctmgr", "-i", *args], env=self.env, capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise RuntimeError(f"sacctmgr {' '.join(args)}: {out.stdout.strip()} {out.stderr.strip()}")
        return out

    def associate(self, user: str) -> None:
        """Let `user` submit (accounting enforces associations): in account ACCOUNT (and root's default
        one, for root), with QoS normal and CAPPED_QOS."""
        if not self.accounting:
            return
        self.sacctmgr("add", "user", user, f"account={ACCOUNT}", "cluster=cucotest", check=False)  # (again: no-op)
        self.sacctmgr("modify", "user", user, "set", f"qos=normal,{CAPPED_QOS}", "defaultqos=normal")

    def stop(self) -> None:
        self.cmd("scancel", "--full", "-u", "root", check=False) if self.conf.exists() else None
        for pidfile in PIDFILES:
            self._stop(self.base / pidfile)

    # ---- what the tests look at ------------------------------------------------------------------
    def queue(self, user: str | None = None, all_states: bool = False) -> list[tuple[str, str, str]]:
        """(job id, state, name) of every job still queued or running (all_states: also those that ended,
        for MinJobAge)."""
        argv = ["squeue", "-h", "-o", "%i|%T|%j"] + (["-u", user] if user else [])
        argv += ["-t", "all"] if all_states else []
        return [tuple(line.split("|", 2)) for line in self.cmd(*argv).splitlines() if line.strip()]

    def sacct(self, name_prefix: str, timeout: float = 30) -> list[dict[str, str]]:
        """Every job Slurm's accounting recorded whose name starts with `name_prefix` (one dict per job:
        JobID, JobName, State) since the cluster started; needs accounting. slurmctld tells slurmdbd
        asynchronously: this waits until sacct has every such job slurmctld still lists (MinJobAge keeps
        them all), in the same state."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.cmd(
                "sacct", "-n", "-P", "-X", "-a", "-S", "2020-01-01T00:00:00", "-E", "now", "-o", "JobID,JobName,State"
            )
            jobs = [dict(zip(("JobID", "JobName", "State"), line.split("|", 2))) for line in out.splitlines() if line]
            jobs = [j for j in jobs if j["JobName"].startswith(name_prefix)]
            recorded = {(j["JobID"], j["State"].split()[0]) for j in jobs}
            known = {(i, state) for i, state, name in self.queue(all_states=True) if name.startswith(name_prefix)}
            if known <= recorded or time.monotonic() > deadline:
                return jobs
            time.sleep(0.2)

    def finished_jobs(self) -> list[dict[str, str]]:
        """One dict per finished job (jobcomp/filetxt's lines: JobId, Name, JobState, ...)."""
        path = self.base / "log" / "jobcomp.txt"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            out.append(dict(f.split("=", 1) for f in line.split() if "=" in f))
        return out


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def reap_abandoned() -> None:
    """Stop (by their pid files) and remove the clusters of test sessions that died without their teardown
    (a test run killed at its timeout): each cluster's folder names the process that started it."""
    for base in Path(tempfile.gettempdir()).glob("cuco-slurm-*"):
        owner = base / "owner"
        if not owner.is_file() or _alive(_read_pid(owner)):
            continue
        cluster = SlurmCluster(base=base, node="", env=dict(os.environ, SLURM_CONF=str(base / "slurm.conf")))
        for pidfile in PIDFILES:
            cluster._stop(base / pidfile)
        shutil.rmtree(base, ignore_errors=True)


def start_cluster(
    scheduler: str = "batch_sched_delay=0", extra_partitions: str = "", accounting: bool = False
) -> SlurmCluster:
    """Start a cluster. `scheduler`: SchedulerParameters; Slurm's default batch_sched_delay=3 holds a
    submitted batch job up to 3 s before the scheduler looks at it (the bench measures both).
    `accounting`: with slurmdbd (see the module's docstring; check accounting_skip_reason() first)."""
    reap_abandoned()
    base = Path(tempfile.mkdtemp(prefix="cuco-slurm-"))
    os.chmod(base, 0o755)
    (base / "owner").write_text(str(os.getpid()))
    node = socket.gethostname().split(".")[0]
    for d in ("munge", "state", "spool", "log", "gres", "mysql"):
        (base / d).mkdir()
    key = base / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    os.chmod(base / "munge", 0o755)  # the socket must be reachable by every user that submits
    for i in range(GPUS):
        os.symlink("/dev/null", base / "gres" / f"gpu{i}")
    cpus = os.cpu_count() or 1
    dbd_port = _free_port()
    # (AccountingStoragePass: the munge socket the connections to slurmdbd authenticate through)
    storage = (
        f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
        f"AccountingStoragePort={dbd_port}\nAccountingStoragePass={base / 'munge' / 'munge.socket'}\n"
        "AccountingStorageEnforce=associations,limits,qos\n"
        if accounting
        else "AccountingStorageType=accounting_storage/none\n"
    )
    (base / "slurm.conf").write_text(f"""ClusterName=cucotest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={base / "munge" / "munge.socket"}
CredType=cred/munge
StateSaveLocation={base / "state"}
SlurmdSpoolDir={base / "spool"}
SlurmctldPidFile={base / "slurmctld.pid"}
SlurmdPidFile={base / "slurmd.pid"}
SlurmctldLogFile={base / "log" / "slurmctld.log"}
SlurmdLogFile={base / "log" / "slurmd.log"}
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
{storage}JobCompType=jobcomp/filetxt
JobCompLoc={base / "log" / "jobcomp.txt"}
SchedulerType=sched/backfill
SchedulerParameters={scheduler}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MinJobAge=3600
MaxJobCount=20000
ReturnToService=2
SlurmdTimeout=30
MpiDefault=none
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=gpu Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=cpu Nodes={node} MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
{extra_partitions}""")
    (base / "gres.conf").write_text(f"NodeName={node} Name=gpu File={base / 'gres'}/gpu[0-{GPUS - 1}]\n")
    env = dict(os.environ, SLURM_CONF=str(base / "slurm.conf"))
    cluster = SlurmCluster(base=base, node=node, env=env, accounting=accounting)
    try:
        cluster.start_munge()
        if accounting:
            cluster.start_accounting(dbd_port)
        cluster.start_slurmctld()
        cluster.start_slurmd()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def remove(cluster: SlurmCluster) -> None:
    cluster.stop()
    shutil.rmtree(cluster.base, ignore_errors=True)


def write_cluster_yaml(path: Path, work_dir: Path, **fields) -> Path:
    """A local-login slurm.yaml for the test cluster (jobs in `gpu`, builds in `cpu`; fields override)."""
    doc = {
        "kind": "slurm",
        "login": "local",
        "work_dir": str(work_dir),
        "partition": "gpu",
        "build": {"partition": "cpu"},
        "poll": {"min_s": 0.2, "max_s": 1.0},
        "kill_grace_s": 0.5,
    }
    doc.update(fields)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
