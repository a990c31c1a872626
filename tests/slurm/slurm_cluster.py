"""A real single-node Slurm on this machine: munged, slurmctld and slurmd on 127.0.0.1, all state in one
temporary folder (used by tests/slurm and tests/bench/bench_slurm.py).

Needs root and Debian's `slurmctld`, `slurmd`, `slurm-client` and `munge`. The node offers 4 GPUs as GPU
GRES: Slurm 22.05 drops GPUs without device files, so each is a symlink to /dev/null (Slurm only counts
them; no job here touches a GPU). Accounting is off (no slurmdbd): `sacct` answers "accounting storage is
disabled", completed jobs stay in `squeue -t all` for MinJobAge, and jobcomp/filetxt writes one line per
finished job to `jobcomp.txt` (the tests count submissions there).
"""

from __future__ import annotations

import os
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
GPUS = 4


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (runs munged, slurmctld and slurmd)"
    missing = [b for b in BINARIES if not Path(b).exists()]
    if missing:
        return f"{', '.join(missing)} missing: apt-get install -y slurmctld slurmd slurm-client munge"
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
    env: dict[str, str]             # SLURM_CONF for the client commands

    @property
    def conf(self) -> Path:
        return self.base / "slurm.conf"

    def cmd(self, *argv: str, check: bool = True) -> str:
        return subprocess.run(list(argv), env=self.env, check=check, capture_output=True, text=True,
                              timeout=60).stdout

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
        self._start(["/usr/sbin/munged", "-f", f"--socket={m / 'munge.socket'}", f"--key-file={m / 'munge.key'}",
                     f"--pid-file={m / 'munged.pid'}", f"--log-file={self.base / 'log' / 'munged.log'}",
                     f"--seed-file={m / 'seed'}"], m / "munged.pid")

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

    def stop(self) -> None:
        self.cmd("scancel", "--full", "-u", "root", check=False) if self.conf.exists() else None
        for pidfile in (self.base / "slurmd.pid", self.base / "slurmctld.pid", self.base / "munge" / "munged.pid"):
            self._stop(pidfile)

    # ---- what the tests look at ------------------------------------------------------------------
    def queue(self, user: str | None = None) -> list[tuple[str, str, str]]:
        """(job id, state, name) of every job still queued or running."""
        argv = ["squeue", "-h", "-o", "%i|%T|%j"] + (["-u", user] if user else [])
        return [tuple(line.split("|", 2)) for line in self.cmd(*argv).splitlines() if line.strip()]

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
        for pidfile in (base / "slurmd.pid", base / "slurmctld.pid", base / "munge" / "munged.pid"):
            cluster._stop(pidfile)
        shutil.rmtree(base, ignore_errors=True)


def start_cluster(scheduler: str = "batch_sched_delay=0", extra_partitions: str = "") -> SlurmCluster:
    """Start a cluster. `scheduler`: SchedulerParameters; Slurm's default batch_sched_delay=3 holds a
    submitted batch job up to 3 s before the scheduler looks at it (the bench measures both)."""
    reap_abandoned()
    base = Path(tempfile.mkdtemp(prefix="cuco-slurm-"))
    os.chmod(base, 0o755)
    (base / "owner").write_text(str(os.getpid()))
    node = socket.gethostname().split(".")[0]
    for d in ("munge", "state", "spool", "log", "gres"):
        (base / d).mkdir()
    key = base / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    os.chmod(base / "munge", 0o755)   # the socket must be reachable by every user that submits
    for i in range(GPUS):
        os.symlink("/dev/null", base / "gres" / f"gpu{i}")
    cpus = os.cpu_count() or 1
    (base / "slurm.conf").write_text(f"""ClusterName=cucotest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={base / 'munge' / 'munge.socket'}
CredType=cred/munge
StateSaveLocation={base / 'state'}
SlurmdSpoolDir={base / 'spool'}
SlurmctldPidFile={base / 'slurmctld.pid'}
SlurmdPidFile={base / 'slurmd.pid'}
SlurmctldLogFile={base / 'log' / 'slurmctld.log'}
SlurmdLogFile={base / 'log' / 'slurmd.log'}
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={base / 'log' / 'jobcomp.txt'}
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
    cluster = SlurmCluster(base=base, node=node, env=env)
    try:
        cluster.start_munge()
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
    doc = {"kind": "slurm", "login": "local", "work_dir": str(work_dir), "partition": "gpu",
           "build": {"partition": "cpu"}, "poll": {"min_s": 0.2, "max_s": 1.0}, "kill_grace_s": 0.5}
    doc.update(fields)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
