"""Run an engine detached from any terminal and serve it to viewers over a Unix socket.

    python -m engine.daemon.daemon --home H --run RUN_ID --create --workload PATH --config-json JSON [--cluster FILE]
    python -m engine.daemon.daemon --home H --run RUN_ID --resume

The CLI spawns this with `start_new_session=True` and stdio to `<home>/runs/<run>/daemon.log`, so a
closed terminal or a lost SSH connection never reaches it. Protocol: engine/daemon/protocol.py.

The engine calls `store.on_event(event)` after every commit; `EngineServer.on_event` only puts the
event into each client's bounded queue (O(1) per client). A client whose queue is full is disconnected
and resyncs with `hello{since}`: a slow viewer never blocks the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from remote.errors import InputError
from remote.jobs import NoUsableNode

from ..config import RunConfig
from ..llm.keys import hold_keys
from ..store.store import ReadStore
from ..workload import load_workload
from . import protocol
from .protocol import PROTOCOL_VERSION, RunInfo

log = logging.getLogger("cuco.daemon")

CLIENT_QUEUE_EVENTS = 5000  # live events buffered per client before it is dropped
REPLAY_PAGE = 2000
WRITE_TIMEOUT_S = 10.0  # a client that does not read for this long is dropped
COMMAND_TIMEOUT_S = {"pause": 120.0, "stop": 30.0, "fork": 120.0}
DEFAULT_COMMAND_TIMEOUT_S = 60.0
ENDED_FLUSH_S = 1.0  # how long an ending engine waits for clients to take its last word


class _Replay:
    """A queue item: send the hello reply, then the events table from `since`."""

    def __init__(self, reply: dict[str, Any], since: int | None):
        self.reply = reply
        self.since = since


class _Client:
    def __init__(self, cid: int, writer: asyncio.StreamWriter, queue_size: int):
        self.cid = cid
        self.writer = writer
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=queue_size)
        self.subscribed = False
        self.dropped = False
        self.last_sent = 0


class EngineServer:
    """The socket side of a live engine: any object with the Engine contract (see engine/run/engine.py)."""

    def __init__(self, engine: Any, home: Path, run_id: str, *, queue_size: int = CLIENT_QUEUE_EVENTS):
        self.engine = engine
        self.home = Path(home)
        self.run_id = run_id
        self.queue_size = queue_size
        self.socket_path = protocol.socket_path_for(self.home, run_id)
        self._server: asyncio.AbstractServer | None = None
        self._clients: dict[int, _Client] = {}
        self._next_cid = 1
        self._reader: ReadStore | None = None  # for replays: its own connection, off the writer's lock
        self._tasks: set[asyncio.Task] = set()
        self.dropped_clients = 0

    # ---- lifecycle

    async def start(self) -> RunInfo:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        old_umask = os.umask(0o177)  # the socket is created 0600
        try:
            self._server = await asyncio.start_unix_server(
                self._serve_client, path=str(self.socket_path), limit=protocol.MAX_LINE_BYTES
            )
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        self._reader = ReadStore(self.home)
        info = RunInfo(
            run_id=self.run_id,
            pid=os.getpid(),
            socket=str(self.socket_path),
            protocol=PROTOCOL_VERSION,
            started_at=time.time(),
        )
        protocol.write_run_info(self.home, info)
        return info

    async def close(self, state: str | None = None, reason: str = "") -> None:
        """Stop serving. With the run's final `state`, every client is told it (and why) before its socket
        closes, so a viewer shows the end at once instead of reconnecting to nothing."""
        protocol.remove_run_info(self.home, self.run_id, pid=os.getpid())
        if self._server is not None:
            self._server.close()
        if state is not None:
            await self._say_ended(state, reason)
        for client in list(self._clients.values()):
            self._drop(client, "engine shutting down")
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    async def _say_ended(self, state: str, reason: str) -> None:
        senders = []
        for client in list(self._clients.values()):
            if client.dropped:
                continue
            try:  # after what is queued for it (the final `run` event included), then the sender ends
                client.queue.put_nowait(protocol.ended(state, reason))
                client.queue.put_nowait(None)
            except asyncio.QueueFull:
                continue
            senders += [t for t in self._tasks if t.get_name() == f"sender-{client.cid}"]
        if senders:
            await asyncio.wait(senders, timeout=ENDED_FLUSH_S)

    # ---- events from the engine (synchronous, O(1) per client)

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("run") not in (self.run_id, None):
            return
        for client in list(self._clients.values()):
            if not client.subscribed or client.dropped:
                continue
            try:
                client.queue.put_nowait(event)
            except asyncio.QueueFull:
                self._drop(client, "too slow: reconnect with hello{since}")

    def _drop(self, client: _Client, why: str) -> None:
        if client.dropped:
            return
        client.dropped = True
        self.dropped_clients += 1
        log.info("client %d dropped: %s", client.cid, why)
        with contextlib.suppress(Exception):
            client.writer.transport.abort()
        self._clients.pop(client.cid, None)

    # ---- one connection

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = _Client(self._next_cid, writer, self.queue_size)
        self._next_cid += 1
        self._clients[client.cid] = client
        sender = asyncio.create_task(self._send_loop(client), name=f"sender-{client.cid}")
        self._tasks.add(sender)
        sender.add_done_callback(self._tasks.discard)
        try:
            while not client.dropped:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    self._queue(client, {"reply": None, "ok": False, "error": "message too long"})
                    break
                except (ConnectionError, OSError):
                    break
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    message = protocol.decode(line)
                except protocol.ProtocolError as exc:
                    self._queue(client, {"reply": None, "ok": False, "error": str(exc)})
                    continue
                await self._dispatch(client, message)
        finally:
            # Let queued replies go out before closing (bounded).
            if not client.dropped:
                with contextlib.suppress(asyncio.QueueFull):
                    client.queue.put_nowait(None)
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(sender), 2.0)
            self._drop(client, "disconnected")
            sender.cancel()

    def _queue(self, client: _Client, message: Any) -> None:
        try:
            client.queue.put_nowait(message)
        except asyncio.QueueFull:
            self._drop(client, "too slow: reconnect with hello{since}")

    async def _send_loop(self, client: _Client) -> None:
        writer = client.writer
        try:
            while True:
                item = await client.queue.get()
                if item is None:
                    return
                if isinstance(item, _Replay):
                    await self._write(client, item.reply)
                    if item.since is not None:
                        await self._replay(client, item.since)
                    continue
                if protocol.is_event(item):
                    if item["seq"] <= client.last_sent:
                        continue
                    client.last_sent = item["seq"]
                await self._write(client, item)
        except (TimeoutError, ConnectionError, OSError):
            self._drop(client, "write failed")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _write(self, client: _Client, message: dict[str, Any]) -> None:
        client.writer.write(protocol.encode(message))
        await asyncio.wait_for(client.writer.drain(), WRITE_TIMEOUT_S)

    async def _replay(self, client: _Client, since: int) -> None:
        cursor = max(since, client.last_sent)
        while not client.dropped:
            assert self._reader is not None
            page = await asyncio.to_thread(self._reader.events_since, cursor, self.run_id, REPLAY_PAGE)
            if not page:
                return
            chunk = bytearray()
            for event in page:
                chunk += protocol.encode(event)
            client.writer.write(bytes(chunk))
            await asyncio.wait_for(client.writer.drain(), WRITE_TIMEOUT_S)
            cursor = page[-1]["seq"]
            client.last_sent = max(client.last_sent, cursor)
            if len(page) < REPLAY_PAGE:
                return

    # ---- commands

    async def _dispatch(self, client: _Client, message: dict[str, Any]) -> None:
        op = message.get("op")
        rid = message.get("id")
        if op == "hello":
            since = message.get("since", 0)
            want_events = bool(message.get("events", True))
            if since is not None and not isinstance(since, int):
                self._queue(client, {"reply": rid, "ok": False, "error": "since must be an integer"})
                return
            try:
                last_seq = await self._last_seq()
            except Exception as exc:  # noqa: BLE001 - a store hiccup refuses this hello, not the daemon
                self._queue(client, {"reply": rid, "ok": False, "error": f"reading the store: {exc}"})
                return
            reply = {
                "reply": rid,
                "ok": True,
                "protocol": PROTOCOL_VERSION,
                "run": self.run_id,
                "pid": os.getpid(),
                "status": self._status(),
                "last_seq": last_seq,
            }
            if want_events:
                self._queue(client, _Replay(reply, since if since is not None else last_seq))
                client.subscribed = True
            else:
                self._queue(client, reply)
            return
        if op not in protocol.COMMANDS:
            self._queue(
                client,
                {"reply": rid, "ok": False, "error": f"unknown op {op!r} (known: {', '.join(protocol.COMMANDS)})"},
            )
            return
        task = asyncio.create_task(self._command(client, op, rid, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _command(self, client: _Client, op: str, rid: Any, message: dict[str, Any]) -> None:
        timeout = COMMAND_TIMEOUT_S.get(op, DEFAULT_COMMAND_TIMEOUT_S)
        try:
            result = await asyncio.wait_for(self._run_command(op, message), timeout)
            reply = {"reply": rid, "ok": True, **(result or {})}
        except TimeoutError:
            reply = {"reply": rid, "ok": False, "error": f"{op} did not finish within {timeout:.0f} s"}
        except InputError as exc:  # the user's to fix: the CLI prints it on one line and exits 2
            reply = {"reply": rid, "ok": False, "error": str(exc), "bad_input": True}
        except (ValueError, KeyError, LookupError, RuntimeError, TypeError) as exc:
            reply = {"reply": rid, "ok": False, "error": str(exc) or type(exc).__name__}
        except Exception as exc:  # noqa: BLE001 - a command must never take the daemon down
            log.exception("command %s failed", op)
            reply = {"reply": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if not client.dropped:
            self._queue(client, reply)

    async def _run_command(self, op: str, m: dict[str, Any]) -> dict[str, Any] | None:
        engine = self.engine
        if op == "status":
            return {"status": self._status()}
        if op == "pause":
            await engine.pause(hard=bool(m.get("hard", False)))
        elif op == "resume":
            await engine.resume()
        elif op == "stop":
            await engine.stop()
        elif op == "accept":
            await engine.accept(_candidate(m), note=str(m.get("note") or ""))
        elif op == "reject":
            reason = str(m.get("reason") or "").strip()
            if not reason:
                raise ValueError("reject needs a reason")
            await engine.reject(_candidate(m), reason)
        elif op == "strategy":
            try:
                await engine.mark_strategy(
                    str(m.get("verdict") or ""), m.get("strategy") or None, str(m.get("text") or "")
                )
            except InputError as exc:  # the operator's to fix: the message is the answer
                raise ValueError(str(exc)) from None
        elif op == "fork":
            frm = m.get("from_candidate")
            overrides = m.get("overrides") or {}
            if not isinstance(overrides, dict):
                raise ValueError("overrides must be an object of setting -> value")
            new_run = await engine.fork(
                from_candidate=int(frm) if frm is not None else None, name=m.get("name") or None, overrides=overrides
            )
            return {"new_run": new_run, "status": self._status()}
        return {"status": self._status()}

    def _status(self) -> dict[str, Any]:
        try:
            return self.engine.status()
        except Exception as exc:  # noqa: BLE001
            return {"run": self.run_id, "error": str(exc)}

    async def _last_seq(self) -> int:
        assert self._reader is not None
        row = await asyncio.to_thread(
            self._reader.fetchone, "SELECT COALESCE(MAX(seq), 0) AS s FROM events WHERE run_id=?", (self.run_id,)
        )
        return int(row["s"]) if row else 0


def _candidate(m: dict[str, Any]) -> int:
    value = m.get("candidate")
    if value is None:
        raise ValueError("missing 'candidate'")
    return int(value)


async def serve(engine: Any, home: Path, run_id: str) -> str:
    """Serve `engine` on its socket while `engine.run()` runs; returns the run's final state."""
    server = EngineServer(engine, home, run_id)
    engine.store.on_event = server.on_event
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task] = []

    def request_stop() -> None:
        if not stopping:
            stopping.append(loop.create_task(engine.stop()))

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, request_stop)
    with contextlib.suppress(AttributeError, ValueError):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # no terminal; never die with one
    await server.start()
    state = None
    try:
        state = await engine.run()
        return state
    finally:
        await server.close(state, getattr(engine, "stop_reason", "") or "")
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _main_async(args: argparse.Namespace) -> int:
    from ..run.engine import Engine  # the live engine (imported here so tests can serve a fake one)

    home = Path(args.home).resolve()
    if protocol.live_run_info(home, args.run) is not None:
        print(
            f"run {args.run}: an engine is already serving it (see {protocol.run_json_path(home, args.run)})",
            file=sys.stderr,
        )
        return 2
    if args.create:
        workload = load_workload(args.workload)
        config = RunConfig.from_dict(json.loads(args.config_json or "{}"))
        if args.cluster:
            config.cluster = args.cluster
        engine = await Engine.create(home, workload, config, run_id=args.run)
    else:
        engine = await Engine.load(home, args.run)
    try:
        state = await serve(engine, home, args.run)
    finally:
        close = getattr(engine, "close", None)
        if close is not None:
            await asyncio.wait_for(close(), 120)
    print(f"run {args.run}: {state}", flush=True)
    return 1 if state == "failed" else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.daemon.daemon", description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--run", required=True)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--create", action="store_true", help="create a new run, then serve it")
    mode.add_argument("--resume", action="store_true", help="restart a run from the store")
    parser.add_argument("--workload", help="workload path (with --create)")
    parser.add_argument("--config-json", help="RunConfig as JSON (with --create)")
    parser.add_argument("--cluster", help="cluster.yaml (with --create)")
    args = parser.parse_args(argv)
    # SIGINT and SIGTERM stop the run cleanly (serve() handles them) even if whoever started this process
    # had them ignored (ignored signals are inherited); until serve() takes over, they end the process.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if argv is None:  # the daemon process itself (not a test calling main): keys to its memory only
        hold_keys()
    if args.create and not args.workload:
        parser.error("--create needs --workload")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(_main_async(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - report, never a bare traceback only
        if isinstance(exc, (InputError, NoUsableNode)):  # the user's to fix: the message, no traceback
            print(f"cuco: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, InputError) else 1
        log.exception("engine daemon failed")
        return 1
    finally:
        protocol.remove_run_info(Path(args.home).resolve(), args.run, pid=os.getpid())


if __name__ == "__main__":
    sys.exit(main())
