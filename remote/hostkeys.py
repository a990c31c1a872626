"""Strict host keys: the application's known_hosts plus the user's, and `cuco nodes trust NODE`.

An unknown or changed key is refused (never `known_hosts=None`); the error says how to trust the key.
Trusting writes one line to the application's known_hosts (`$CUCO_HOME/known_hosts` by default),
replacing any older key recorded there for the same host.
"""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh


class HostKeyRefused(Exception):
    """The node's host key is unknown or changed; the message tells the user how to trust it."""

    def __init__(self, node: str, detail: str):
        self.node = node
        super().__init__(
            f"node {node}: host key not trusted ({detail}). Check the key, then run "
            f"`cuco nodes trust {node}` to trust it (it shows the fingerprint and asks to confirm)."
        )


def default_user_known_hosts() -> list[Path]:
    return [Path("~/.ssh/known_hosts").expanduser()]


class KnownHostsFiles:
    """The files whose keys are trusted: the application's file first, then the user's."""

    def __init__(self, app_file: Path, user_files: list[Path] | None = None):
        self.app_file = Path(app_file)
        self.user_files = default_user_known_hosts() if user_files is None else [Path(p) for p in user_files]

    def load(self) -> asyncssh.SSHKnownHosts:
        """A fresh copy of every trusted key (re-read on each connect so `trust` takes effect at once).

        Always an `SSHKnownHosts` object (never None): with no files, nothing is trusted.
        """
        chunks = []
        for p in [self.app_file, *self.user_files]:
            try:
                chunks.append(p.read_text())
            except (FileNotFoundError, NotADirectoryError):
                continue
        return asyncssh.import_known_hosts("\n".join(chunks))


def known_hosts_name(host: str, port: int | None, alias: str | None = None) -> str:
    """The name OpenSSH and asyncssh look a key up by: `host`, or `[host]:port` off port 22."""
    name = alias or host
    return name if port in (None, 22) else f"[{name}]:{port}"


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def write_trusted_key(app_file: Path, name: str, key: asyncssh.SSHKey) -> None:
    """Record `key` for `name`, replacing older lines for that exact name (atomic rewrite, mode 0600)."""
    app_file = Path(app_file)
    app_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = app_file.read_text().splitlines()
    except FileNotFoundError:
        old = []
    kept = [ln for ln in old if not (ln.split(" ", 1)[0].split(",").count(name))]
    line = f"{name} {key.export_public_key('openssh').decode().strip()}"
    tmp = app_file.with_name(app_file.name + f".tmp{os.getpid()}")
    tmp.write_text("\n".join([*kept, line]) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, app_file)
