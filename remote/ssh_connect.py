"""Opening one SSH connection to a node: ~/.ssh/config, the agent, ProxyJump, strict host keys."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import asyncssh

from .cluster import NodeConfig
from .hostkeys import HostKeyRefused, KnownHostsFiles, known_hosts_name


class SSHSettings(Protocol):
    """The SSH options a cluster file carries (an SSH cluster's and a Slurm cluster's alike)."""

    @property
    def known_hosts(self) -> Path | None: ...
    @property
    def ssh_config(self) -> Path | None: ...
    @property
    def keepalive_interval(self) -> float: ...
    @property
    def keepalive_count_max(self) -> int: ...
    @property
    def connect_timeout_s(self) -> float: ...


class NodeUnreachable(Exception):
    """Could not connect or log in to a node (the message says why)."""


@dataclass
class SSHContext:
    """What every connection needs besides the node itself."""

    known_hosts: KnownHostsFiles
    ssh_config: Path | None = None  # None: ~/.ssh/config when it exists
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 4
    connect_timeout_s: float = 15.0
    extra: dict = field(default_factory=dict)  # extra asyncssh options (tests)

    @classmethod
    def from_cluster(cls, cluster: SSHSettings, home: Path, user_known_hosts: list[Path] | None = None) -> SSHContext:
        app = cluster.known_hosts or Path(home) / "known_hosts"
        return cls(
            known_hosts=KnownHostsFiles(app, user_known_hosts),
            ssh_config=cluster.ssh_config,
            keepalive_interval=cluster.keepalive_interval,
            keepalive_count_max=cluster.keepalive_count_max,
            connect_timeout_s=cluster.connect_timeout_s,
        )

    def config_paths(self) -> list[str]:
        p = self.ssh_config if self.ssh_config is not None else Path("~/.ssh/config").expanduser()
        return [str(p)] if p.is_file() else []


def _options(node: NodeConfig, ctx: SSHContext, **more) -> dict:
    opts: dict = dict(
        config=ctx.config_paths(),
        known_hosts=ctx.known_hosts.load(),
        keepalive_interval=ctx.keepalive_interval,
        keepalive_count_max=ctx.keepalive_count_max,
        connect_timeout=ctx.connect_timeout_s,
        login_timeout=ctx.connect_timeout_s,
    )
    if node.port is not None:
        opts["port"] = node.port
    if node.user is not None:
        opts["username"] = node.user
    if node.identity_file is not None:
        opts["client_keys"] = [str(Path(node.identity_file).expanduser())]
    opts.update(ctx.extra)
    opts.update(more)
    return opts


async def _open_jump(node: NodeConfig, ctx: SSHContext) -> asyncssh.SSHClientConnection | None:
    if not node.proxy_jump:
        return None
    spec = node.proxy_jump
    user = port = None
    if "@" in spec:
        user, spec = spec.split("@", 1)
    if spec.count(":") == 1:
        spec, p = spec.split(":")
        port = int(p)
    opts = dict(
        config=ctx.config_paths(),
        known_hosts=ctx.known_hosts.load(),
        keepalive_interval=ctx.keepalive_interval,
        keepalive_count_max=ctx.keepalive_count_max,
        connect_timeout=ctx.connect_timeout_s,
        login_timeout=ctx.connect_timeout_s,
    )
    if user:
        opts["username"] = user
    if port:
        opts["port"] = port
    opts.update(ctx.extra)
    try:
        return await asyncio.wait_for(asyncssh.connect(spec, **opts), ctx.connect_timeout_s + 5)
    except asyncssh.HostKeyNotVerifiable as exc:
        raise HostKeyRefused(node.name, f"jump host {node.proxy_jump}: {exc.reason}") from None
    except (TimeoutError, OSError, asyncssh.Error) as exc:
        raise NodeUnreachable(f"jump host {node.proxy_jump}: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"authentication failed ({exc.reason})"
    if isinstance(exc, asyncssh.Error):
        return exc.reason or type(exc).__name__
    return str(exc) or type(exc).__name__


async def connect_node(node: NodeConfig, ctx: SSHContext) -> asyncssh.SSHClientConnection:
    """One authenticated connection to `node` (raises HostKeyRefused or NodeUnreachable)."""
    jump = await _open_jump(node, ctx)
    opts = _options(node, ctx)
    if jump is not None:
        opts["tunnel"] = jump
    try:
        conn = await asyncio.wait_for(asyncssh.connect(node.host, **opts), ctx.connect_timeout_s + 5)
    except asyncssh.HostKeyNotVerifiable as exc:
        if jump is not None:
            jump.close()
        raise HostKeyRefused(node.name, exc.reason) from None
    except (TimeoutError, OSError, asyncssh.Error) as exc:
        if jump is not None:
            jump.close()
        raise NodeUnreachable(f"{node.name} ({node.host}): {_why(exc)}") from None
    if jump is not None:
        # Close the jump connection with the node's connection.
        async def _close_jump() -> None:
            try:
                await conn.wait_closed()
            finally:
                jump.close()

        asyncio.get_running_loop().create_task(_close_jump())
    return conn


@dataclass
class PresentedKey:
    key: asyncssh.SSHKey
    name: str  # the known_hosts name to record it under: host or [host]:port
    host: str  # after ~/.ssh/config (HostName, HostKeyAlias)
    port: int

    def trusted_keys(self, ctx: SSHContext) -> list[asyncssh.SSHKey]:
        """The keys trusted now for this host (empty: unknown host)."""
        port = None if self.port == 22 else self.port
        return list(ctx.known_hosts.load().match(self.host, "", port)[0])


async def fetch_host_key(node: NodeConfig, ctx: SSHContext) -> PresentedKey:
    """The key the node presents now, and the known_hosts name to record it under (for `trust`).

    The jump host (if any) must already be trusted: it is connected to strictly.
    """
    opts = await asyncssh.SSHClientConnectionOptions.construct(
        config=ctx.config_paths(),
        host=node.host,
        port=node.port if node.port is not None else (),
        known_hosts=ctx.known_hosts.load(),
    )
    name = known_hosts_name(opts.host, opts.port, opts.host_key_alias)
    jump = await _open_jump(node, ctx)
    kw: dict = {"config": ctx.config_paths()}
    if node.port is not None:
        kw["port"] = node.port
    if jump is not None:
        kw["tunnel"] = jump
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(node.host, **kw), ctx.connect_timeout_s + 5)
    except (TimeoutError, OSError, asyncssh.Error) as exc:
        raise NodeUnreachable(f"{node.name} ({node.host}): {_why(exc)}") from None
    finally:
        if jump is not None:
            jump.close()
    if key is None:
        raise NodeUnreachable(f"{node.name}: the server presented no host key")
    return PresentedKey(key, name, opts.host_key_alias or opts.host, opts.port)
