"""An async client of the engine daemon (engine/daemon/protocol.py), with reconnect.

    client = EngineClient(socket_path)
    hello = await client.connect(since=0)          # replay from seq 0, then live events
    async for batch in client.batches(): ...        # lists of events, every ~50 ms or on a lull
    await client.request("pause", hard=True)        # raises EngineError when the daemon says ok: false

If the connection drops (the daemon dropped a slow client, or it restarted) the client reconnects and
says `hello{since: last seq seen}`, so no event is lost or repeated. When the engine is gone for good
(`reconnect_attempts` failed) `batches()` raises `EngineGone`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from engine.daemon import protocol

CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 60.0


class EngineError(RuntimeError):
    """The engine refused a command (its reply's `error`); `bad_input`: the user's to fix (exit 2)."""

    def __init__(self, message: str, bad_input: bool = False):
        super().__init__(message)
        self.bad_input = bad_input


class EngineGone(ConnectionError):
    """The engine's socket no longer answers."""


class EngineEnded(EngineGone):
    """The engine said the run ended (its final state and why) and closed: there is nothing to reconnect to."""

    def __init__(self, state: str, reason: str):
        super().__init__(f"the run {state}" + (f": {reason}" if reason else ""))
        self.state = state
        self.reason = reason


class EngineClient:
    def __init__(
        self,
        socket_path: str | Path,
        *,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        request_timeout: float = REQUEST_TIMEOUT_S,
        reconnect_attempts: int = 20,
        reconnect_delay: float = 0.25,
        events: bool = True,
    ):
        self.socket_path = str(socket_path)
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self.want_events = events
        self.last_seq = 0
        self.hello: dict[str, Any] = {}
        self.reconnects = 0
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._events: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task | None = None
        self._closed = False
        self.ended: EngineEnded | None = None
        self._connected = asyncio.Event()

    # ---- connection

    async def connect(self, since: int | None = 0) -> dict[str, Any]:
        """Connect and say hello. `since=None`: live events only (no replay)."""
        if since is not None:
            self.last_seq = since
        return await self._open(since)

    async def _open(self, since: int | None) -> dict[str, Any]:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(self.socket_path, limit=protocol.MAX_LINE_BYTES), self.connect_timeout
        )
        self._reader, self._writer = reader, writer
        rid = next(self._ids)
        writer.write(protocol.encode({"op": "hello", "id": rid, "since": since, "events": self.want_events}))
        await asyncio.wait_for(writer.drain(), self.connect_timeout)
        line = await asyncio.wait_for(reader.readline(), self.connect_timeout)
        if not line:
            raise EngineGone(f"{self.socket_path}: the engine closed the connection during hello")
        hello = protocol.decode(line)
        if not hello.get("ok"):
            raise EngineError(hello.get("error", "hello refused"))
        if hello.get("protocol") != protocol.PROTOCOL_VERSION:
            raise EngineError(
                f"engine speaks protocol {hello.get('protocol')}, this cuco "
                f"{protocol.PROTOCOL_VERSION}: upgrade the older side"
            )
        if since is None:
            self.last_seq = int(hello.get("last_seq") or 0)
        self.hello = hello
        self._read_task = asyncio.create_task(self._read_loop(reader))
        self._connected.set()
        return hello

    async def close(self) -> None:
        self._closed = True
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._read_task, 2.0)
        self._close_writer()
        self._fail_pending(EngineGone("client closed"))

    def _close_writer(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None

    async def __aenter__(self) -> EngineClient:
        if not self._connected.is_set():
            await self.connect(since=None)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _fail_pending(self, exc: BaseException) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self._pending.clear()

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                message = protocol.decode(line)
                if isinstance(message.get("ended"), dict):
                    end = message["ended"]
                    self.ended = EngineEnded(str(end.get("state") or "ended"), str(end.get("reason") or ""))
                    self._closed = True  # its last word: no reconnecting to an engine that is gone
                    self._events.put_nowait(self.ended)
                elif "reply" in message:
                    fut = self._pending.pop(message["reply"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(message)
                elif protocol.is_event(message):
                    seq = int(message["seq"])
                    if seq > self.last_seq:
                        self.last_seq = seq
                        self._events.put_nowait(message)
        except (ConnectionError, OSError, protocol.ProtocolError, ValueError):
            pass
        finally:
            self._connected.clear()
            self._fail_pending(self.ended or EngineGone("connection to the engine lost"))
            if not self._closed:
                asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        self._close_writer()
        for attempt in range(self.reconnect_attempts):
            if self._closed:
                return
            await asyncio.sleep(min(self.reconnect_delay * (attempt + 1), 2.0))
            try:
                await self._open(self.last_seq)
                self.reconnects += 1
                return
            except (TimeoutError, OSError, EngineGone, protocol.ProtocolError):
                continue
            except EngineError as exc:
                self._events.put_nowait(exc)
                return
        self._events.put_nowait(EngineGone(f"{self.socket_path}: the engine does not answer any more"))

    # ---- requests

    async def request(self, op: str, timeout: float | None = None, **args: Any) -> dict[str, Any]:
        if self.ended is not None:
            raise self.ended
        if self._writer is None or not self._connected.is_set():  # lost: give a reconnect its chance first
            try:
                await asyncio.wait_for(self._connected.wait(), self.connect_timeout)
            except TimeoutError:
                raise EngineGone("not connected to the engine") from None
        assert self._writer is not None
        rid = next(self._ids)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            self._writer.write(protocol.encode({"op": op, "id": rid, **args}))
            await asyncio.wait_for(self._writer.drain(), self.connect_timeout)
            reply = await asyncio.wait_for(fut, timeout or self.request_timeout)
        except TimeoutError:
            raise EngineError(
                f"{op}: no reply from the engine within {timeout or self.request_timeout:.0f} s"
            ) from None
        except EngineGone:
            raise
        except OSError as exc:  # the engine died between the read loop's last look and this write
            raise EngineGone(f"{op}: connection to the engine lost ({exc.strerror or exc})") from None
        finally:
            self._pending.pop(rid, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # failed by the read loop while the write failed too: this raise says it
        if not reply.get("ok"):
            raise EngineError(reply.get("error") or f"{op} failed", bad_input=bool(reply.get("bad_input")))
        return reply

    # ---- events

    async def next_event(self, timeout: float | None = None) -> dict[str, Any]:
        item = await asyncio.wait_for(self._events.get(), timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    async def batches(self, interval: float = 0.05, max_batch: int = 5000) -> AsyncIterator[list[dict[str, Any]]]:
        """Events grouped per ~`interval`; a batch is also flushed on a lull (no event for `interval`).

        No `asyncio.wait_for` here: before Python 3.12 it can swallow a cancellation that arrives just as
        the awaited item does, and a busy stream makes that likely (the app's link worker then outlives
        the app). `asyncio.timeout` does not have that flaw.
        """
        queue = self._events
        while True:
            first = await queue.get()
            if isinstance(first, BaseException):
                raise first
            batch = [first]
            deadline = time.monotonic() + interval
            while len(batch) < max_batch:
                while not queue.empty() and len(batch) < max_batch:
                    item = queue.get_nowait()
                    if isinstance(item, BaseException):
                        yield batch
                        raise item
                    batch.append(item)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or len(batch) >= max_batch:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        item = await queue.get()
                except TimeoutError:
                    break  # a lull: flush what we have
                if isinstance(item, BaseException):
                    yield batch
                    raise item
                batch.append(item)
            yield batch


async def one_request(
    socket_path: str | Path, op: str, timeout: float = REQUEST_TIMEOUT_S, **args: Any
) -> dict[str, Any]:
    """Connect (no events), send one command, return its reply."""
    client = EngineClient(socket_path, events=False, reconnect_attempts=0, request_timeout=timeout)
    try:
        await client.connect(since=None)
        return await client.request(op, **args)
    finally:
        await client.close()


async def ping(socket_path: str | Path, timeout: float = 2.0) -> dict[str, Any] | None:
    """The hello reply when the socket answers, else None."""
    client = EngineClient(socket_path, events=False, reconnect_attempts=0, connect_timeout=timeout)
    try:
        return await client.connect(since=None)
    except (TimeoutError, OSError, EngineError, EngineGone, protocol.ProtocolError):
        return None
    finally:
        await client.close()
