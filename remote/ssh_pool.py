"""A pool of SSH connections to one node: at most 8 channels per connection, more connections for more
parallelism, reconnect with exponential backoff.

OpenSSH allows 10 sessions per connection and frees them lazily: a refused session open on a live
connection is retried (OPEN_RETRIES), not taken for a lost link.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncssh

from .hostkeys import HostKeyRefused
from .ssh_connect import NodeUnreachable

MAX_CHANNELS_PER_CONNECTION = 8
# A session refused on a live connection is retried this often, after 0.05, 0.1, 0.2, 0.4 s: sshd counts a
# closed session against MaxSessions (10) until it has freed it, so 8 in use can still meet a refusal
# (seen: 60 quick jobs on 2 nodes failed 1 run in 3 with "open failed" and quarantined both nodes).
OPEN_RETRIES = 4
OPEN_RETRY_BASE_S = 0.05


def out_text(output: bytes | str | None) -> str:
    """A completed command's stdout or stderr as text (a `binary=True` run gives bytes)."""
    if output is None:
        return ""
    return output if isinstance(output, str) else output.decode("utf-8", "replace")


class NodeDown(Exception):
    """The node cannot be reached now (connect failed, or still backing off after a failure)."""


class _Conn:
    __slots__ = ("conn", "in_use")

    def __init__(self, conn: asyncssh.SSHClientConnection):
        self.conn = conn
        self.in_use = 0


class SSHPool:
    def __init__(
        self,
        name: str,
        connect: Callable[[], Awaitable[asyncssh.SSHClientConnection]],
        max_connections: int = 8,
        max_channels: int = MAX_CHANNELS_PER_CONNECTION,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        acquire_timeout_s: float = 60.0,
    ):
        self.name = name
        self._connect = connect
        self.max_connections = max_connections
        self.max_channels = max_channels
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.acquire_timeout_s = acquire_timeout_s
        self._conns: list[_Conn] = []
        self._connecting = 0
        self._cond = asyncio.Condition()
        self._fail_count = 0
        self.down_until = 0.0
        self.last_error = ""
        self.connects = 0  # connections opened (for tests and the bench)
        self._closed = False

    def in_backoff(self) -> bool:
        return time.monotonic() < self.down_until

    def mark_down(self, why: str) -> None:
        """Called when a connection failed under a job: drop dead connections and back off."""
        self.last_error = why
        self._fail_count += 1
        self.down_until = time.monotonic() + min(self.backoff_max_s, self.backoff_base_s * 2 ** (self._fail_count - 1))
        for c in list(self._conns):
            if c.conn.is_closed():
                self._conns.remove(c)

    def _alive(self) -> list[_Conn]:
        self._conns = [c for c in self._conns if not c.conn.is_closed()]
        return self._conns

    async def _take(self) -> _Conn:
        async with self._cond:
            while True:
                if self._closed:
                    raise NodeDown(f"{self.name}: pool closed")
                for c in self._alive():
                    if c.in_use < self.max_channels:
                        c.in_use += 1
                        return c
                if len(self._conns) + self._connecting < self.max_connections:
                    if self.in_backoff():
                        raise NodeDown(f"{self.name}: {self.last_error or 'down'} (retrying later)")
                    self._connecting += 1
                    break
                await self._cond.wait()
        try:
            conn = await self._connect()
        except (HostKeyRefused, NodeUnreachable) as exc:
            async with self._cond:
                self._connecting -= 1
                self.mark_down(str(exc))
                self._cond.notify_all()
            if isinstance(exc, HostKeyRefused):
                raise
            raise NodeDown(str(exc)) from None
        except BaseException:
            async with self._cond:
                self._connecting -= 1
                self._cond.notify_all()
            raise
        async with self._cond:
            self._connecting -= 1
            self.connects += 1
            self._fail_count = 0
            self.down_until = 0.0
            c = _Conn(conn)
            c.in_use = 1
            if self._closed:
                conn.close()
                raise NodeDown(f"{self.name}: pool closed")
            self._conns.append(c)
            self._cond.notify_all()
            return c

    async def _give(self, c: _Conn) -> None:
        async with self._cond:
            c.in_use -= 1
            self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def channel(self) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """Reserve one channel on a live connection for the duration of the block."""
        c = await asyncio.wait_for(self._take(), self.acquire_timeout_s)
        try:
            yield c.conn
        finally:
            await asyncio.shield(self._give(c))

    async def run(
        self, command: str, *, input: bytes | str | None = None, timeout: float, binary: bool = False
    ) -> asyncssh.SSHCompletedProcess:
        """Run one command on a pooled channel, with a timeout (raises NodeDown if the link fails)."""
        for attempt in range(OPEN_RETRIES + 1):
            conn = None
            try:
                async with self.channel() as conn:
                    res = await asyncio.wait_for(
                        conn.run(
                            command,
                            input=input,
                            check=False,
                            encoding=None if binary else "utf-8",
                            errors="replace" if not binary else "strict",
                        ),
                        timeout,
                    )
                break
            except asyncssh.ChannelOpenError as exc:
                # Refused before the command started, so nothing ran. On a live connection that is sshd's
                # session limit with closed sessions not freed yet (it frees them lazily), not a lost link.
                if conn is not None and not conn.is_closed() and attempt < OPEN_RETRIES:
                    await asyncio.sleep(OPEN_RETRY_BASE_S * 2**attempt)
                    continue
                raise self._lost(exc) from None
            except (asyncssh.ConnectionLost, asyncssh.DisconnectError, OSError, BrokenPipeError) as exc:
                raise self._lost(exc) from None
        assert conn is not None  # the attempt that broke out of the loop opened it
        if res.exit_status in (None, -1):
            # No exit status: the channel closed under the command (connection lost, or killed by a signal).
            why = f"signal {res.exit_signal[0]}" if res.exit_signal else "channel closed"
            if conn.is_closed():
                self.mark_down(f"connection lost ({why})")
            raise NodeDown(f"{self.name}: command ended without an exit status ({why})")
        return res

    def _lost(self, exc: BaseException) -> NodeDown:
        why = getattr(exc, "reason", "") or exc
        self.mark_down(f"connection lost: {why}")
        return NodeDown(f"{self.name}: connection lost ({why})")

    async def close(self) -> None:
        async with self._cond:
            self._closed = True
            conns, self._conns = self._conns, []
            self._cond.notify_all()
        for c in conns:
            c.conn.close()
        for c in conns:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.conn.wait_closed(), 5)
