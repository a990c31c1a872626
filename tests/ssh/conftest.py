"""Real OpenSSH sshd daemons on 127.0.0.1 for the SSH executor's tests.

Needs root (to create the login user `cucotest` and run sshd) and Debian's `openssh-server`
(`apt-get install -y openssh-server`); otherwise every test here is skipped with the reason.
Each test gets two fresh daemons (nodes `a` and `b`) on free ports, with temporary host keys,
a temporary client key in a temporary AuthorizedKeysFile, and an application known_hosts that
trusts both. Daemons (and everything they started) are killed on teardown.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest
import yaml

SSHD = "/usr/sbin/sshd"
USER = "cucotest"


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (creates the login user cucotest and runs sshd)"
    if not Path(SSHD).exists():
        return f"{SSHD} missing: apt-get install -y openssh-server"
    return None


def pytest_collection_modifyitems(config, items):
    reason = skip_reason()
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here and "nodes" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.sshd)
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"SSH tests skipped: {reason}"))


def ensure_user() -> pwd.struct_passwd:
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", USER], check=True, capture_output=True)
        pw = pwd.getpwnam(USER)
    # A new account is locked ("!"), which sshd refuses even for keys: "*" means no password, not locked.
    subprocess.run(["usermod", "-p", "*", USER], check=True, capture_output=True)
    Path(pw.pw_dir).mkdir(parents=True, exist_ok=True)
    os.chown(pw.pw_dir, pw.pw_uid, pw.pw_gid)
    return pw


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


@dataclass
class Sshd:
    name: str
    port: int
    dir: Path
    host_key: asyncssh.SSHKey
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "sshd.log", "ab"),
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd {self.name} exited: {(self.dir / 'sshd.log').read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"sshd {self.name} did not listen on {self.port}")

    def kill(self) -> None:
        """Kill the daemon and everything under it (sessions and the jobs they started): a dead node."""
        if self.proc is None:
            return
        for _ in range(3):
            for p in [self.proc.pid, *_descendants(self.proc.pid)]:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait(timeout=10)
        self.proc = None


@dataclass
class Nodes:
    base: Path
    home: Path  # the engine's .cuco dir (holds known_hosts)
    client_key: Path
    ssh_config: Path
    sshds: dict[str, Sshd] = field(default_factory=dict)
    marks: Path = Path()  # a folder jobs may write to (to observe them from the test)

    def work_dir(self, name: str) -> Path:
        return self.base / f"work-{name}"

    def cluster_yaml(self, extra_nodes: dict | None = None, node_extra: dict | None = None, **top) -> Path:
        nodes = []
        for name, d in self.sshds.items():
            n = {
                "name": name,
                "host": "127.0.0.1",
                "port": d.port,
                "user": USER,
                "identity_file": str(self.client_key),
                "work_dir": str(self.work_dir(name)),
                "cpu_slots": 4,
                "gpus": [],
            }
            n.update((node_extra or {}).get(name, {}))
            nodes.append(n)
        doc = {
            "ssh_config": str(self.ssh_config),
            "nodes": nodes,
            "quarantine": {"failures": 3, "window_s": 60, "duration_s": 600},
            "connect_timeout_s": 5,
            "kill_grace_s": 0.5,
        }
        # The marks folder is the one place outside their job directory the sandbox lets these jobs write.
        doc["defaults"] = {"setup": [f"export CUCO_SANDBOX_WRITABLE={self.marks}"]}
        doc.update(top)
        path = self.base / "cluster.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def trust_all(self) -> None:
        lines = [f"[127.0.0.1]:{d.port} {d.host_key.export_public_key().decode().strip()}" for d in self.sshds.values()]
        (self.home / "known_hosts").write_text("\n".join(lines) + "\n")


def _make_sshd(base: Path, name: str, authorized: Path) -> Sshd:
    d = base / f"sshd-{name}"
    d.mkdir()
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(d / "host_key"))
    os.chmod(d / "host_key", 0o600)
    port = _free_port()
    (d / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d / "host_key"}
PidFile none
AuthorizedKeysFile {authorized}
UsePAM no
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowUsers {USER}
Subsystem sftp internal-sftp
MaxStartups 100:30:200
LogLevel ERROR
""")
    return Sshd(name=name, port=port, dir=d, host_key=key)


@pytest.fixture(scope="session")
def ssh_user() -> pwd.struct_passwd:
    return ensure_user()


@contextlib.contextmanager
def make_nodes(ssh_user: pwd.struct_passwd, names: tuple[str, ...] = ("a", "b")) -> Iterator[Nodes]:
    """Start one sshd per name (also used by tests/bench/bench_ssh_dispatch.py)."""
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="cuco-ssh-"))
    os.chmod(base, 0o755)
    home = base / "home"
    home.mkdir()
    auth = base / "auth"
    auth.mkdir(mode=0o755)
    ck = asyncssh.generate_private_key("ssh-ed25519")
    ck.write_private_key(str(base / "client_key"))
    os.chmod(base / "client_key", 0o600)
    (auth / "authorized_keys").write_text(ck.export_public_key().decode())
    os.chmod(auth / "authorized_keys", 0o644)
    marks = base / "marks"
    marks.mkdir()
    os.chown(marks, ssh_user.pw_uid, ssh_user.pw_gid)
    for name in names:
        w = base / f"work-{name}"
        w.mkdir()
        os.chown(w, ssh_user.pw_uid, ssh_user.pw_gid)
    ssh_config = base / "ssh_config"
    ssh_config.write_text("")
    n = Nodes(base=base, home=home, client_key=base / "client_key", ssh_config=ssh_config, marks=marks)
    try:
        for name in names:
            n.sshds[name] = _make_sshd(base, name, auth / "authorized_keys")
            n.sshds[name].start()
        n.trust_all()
        yield n
    finally:
        for d in n.sshds.values():
            d.kill()
        # Jobs run as cucotest under these sshds died with them; remove the files.
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def nodes(ssh_user):
    """Two live sshd nodes, `a` and `b`, trusted in `nodes.home / 'known_hosts'`."""
    with make_nodes(ssh_user) as n:
        yield n
