"""Shell commands on a cluster's login node: over the SSH pool (remote.ssh_pool.SSHPool), or here when
cuco runs on the login node itself. Both have `run(command, input=, timeout=, binary=)` returning an
object with `exit_status`, `stdout`, `stderr`, and `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass

from .cluster import NodeConfig
from .sandbox import job_environment
from .ssh_connect import SSHContext, connect_node
from .ssh_pool import SSHPool


@dataclass
class Completed:
    exit_status: int | None
    stdout: str | bytes
    stderr: str | bytes


class LocalShell:
    """`sh -c` on this machine, in its own process group, with the engine's secrets left out of its
    environment (sbatch hands its environment to the job)."""

    name = "login (local)"

    def __init__(self, extra_env: dict[str, str] | None = None):
        self.env = job_environment(dict(extra_env or {}), {})

    async def run(
        self, command: str, *, input: bytes | str | None = None, timeout: float, binary: bool = False
    ) -> Completed:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        data = input.encode() if isinstance(input, str) else input
        try:
            out, err = await asyncio.wait_for(proc.communicate(data), timeout)
        except BaseException:  # timeout or cancel: nothing it started may linger
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
            raise
        if binary:
            return Completed(proc.returncode, out, err)
        return Completed(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    async def close(self) -> None:
        return None


def open_login_shell(login: NodeConfig | None, ctx_factory, extra_env: dict[str, str] | None = None):
    """The login node's shell: LocalShell when `login` is None, else an SSH pool to it (connected lazily,
    with the SSH executor's host-key rules). `ctx_factory()` makes the SSHContext."""
    if login is None:
        return LocalShell(extra_env)
    ctx: SSHContext = ctx_factory()
    return SSHPool(
        login.name,
        lambda: connect_node(login, ctx),
        max_connections=login.max_connections,
        acquire_timeout_s=ctx.connect_timeout_s * 2 + 10,
    )
