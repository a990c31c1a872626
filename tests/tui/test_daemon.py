"""The daemon's socket protocol, against a fake engine with the Engine contract (fast, no GPU)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest
from storefill import FakeEngine, serve, shutdown

from cuco_tui.client import EngineClient, EngineError, one_request, ping
from engine.daemon import protocol
from engine.daemon.daemon import EngineServer
from engine.store.store import ReadStore

RUN = "demo-test-1"


async def test_run_json_socket_mode_and_cleanup(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN)
    try:
        assert protocol.live_run_info(tmp_path, RUN) == info
        assert stat.S_IMODE(os.stat(info.socket).st_mode) == 0o600
        assert info.pid == os.getpid()
        hello = await ping(info.socket)
        assert hello and hello["run"] == RUN and hello["protocol"] == protocol.PROTOCOL_VERSION
    finally:
        await shutdown(engine, server, task)
    assert not protocol.run_json_path(tmp_path, RUN).exists()
    assert not Path(info.socket).exists()


def test_long_home_gets_a_short_socket_path(tmp_path):
    deep = tmp_path / ("x" * 120)
    path = protocol.socket_path_for(deep, RUN)
    assert len(str(path)) <= protocol.MAX_SOCKET_PATH
    assert protocol.socket_path_for(deep, RUN) == path  # stable


async def test_hello_replays_then_streams_without_gaps(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.01)
    try:
        await asyncio.sleep(0.3)
        client = EngineClient(info.socket)
        await client.connect(since=0)
        seqs = []
        while len(seqs) < 60:
            seqs.append((await client.next_event(timeout=5))["seq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        db = ReadStore(tmp_path)
        expected = [e["seq"] for e in db.events_since(0, RUN, limit=60)]
        assert seqs == expected  # the replayed prefix and the live tail are seamless
        await client.close()
    finally:
        await shutdown(engine, server, task)


async def test_commands_change_the_store(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.02, max_candidates=5)
    try:
        await asyncio.sleep(0.3)
        await one_request(info.socket, "pause", hard=True)
        db = ReadStore(tmp_path)
        assert db.run(RUN)["state"] == "paused"
        await one_request(info.socket, "resume")
        assert db.run(RUN)["state"] == "running"
        await one_request(info.socket, "accept", candidate=1, note="good")
        assert db.latest_mark(1)["verdict"] == "accept"
        with pytest.raises(EngineError, match="reason"):
            await one_request(info.socket, "reject", candidate=2, reason=" ")
        await one_request(info.socket, "reject", candidate=2, reason="cheats")
        assert db.latest_mark(2)["text"] == "cheats"
        with pytest.raises(EngineError, match="not in run"):
            await one_request(info.socket, "accept", candidate=999)
        reply = await one_request(info.socket, "fork", from_candidate=1, name="wide", overrides={"islands": 4})
        assert db.run(reply["new_run"])["parent_run"] == RUN
        with pytest.raises(EngineError, match="unknown op"):
            await one_request(info.socket, "explode")
        status = (await one_request(info.socket, "status"))["status"]
        assert status["run"] == RUN
        await one_request(info.socket, "stop")
        assert await asyncio.wait_for(task, 10) == "stopped"
    finally:
        if not task.done():
            await engine.stop()
        await server.close()


async def test_slow_client_is_dropped_and_resyncs(tmp_path):
    engine = await FakeEngine.open(tmp_path, RUN, interval=0.0005)
    server = EngineServer(engine, tmp_path, RUN, queue_size=20)
    engine.store.on_event = server.on_event
    info = await server.start()
    task = asyncio.create_task(engine.run())
    try:
        # A viewer that says hello and then never reads: its queue overflows and it is dropped,
        # while the engine keeps committing.
        reader, writer = await asyncio.open_unix_connection(info.socket)
        writer.write(protocol.encode({"op": "hello", "id": 1, "since": 0}))
        await writer.drain()
        for _ in range(200):
            if server.dropped_clients:
                break
            await asyncio.sleep(0.05)
        assert server.dropped_clients >= 1
        created = engine.created
        await asyncio.sleep(0.2)
        assert engine.created > created  # never blocked
        writer.close()

        # A real client that gets dropped reconnects with hello{since} and sees no gap.
        client = EngineClient(info.socket, reconnect_delay=0.05)
        await client.connect(since=0)
        seqs = [(await client.next_event(timeout=5))["seq"] for _ in range(30)]
        for c in list(server._clients.values()):
            server._drop(c, "test")
        for _ in range(100):
            if client.reconnects:
                break
            await asyncio.sleep(0.05)
        seqs += [(await client.next_event(timeout=5))["seq"] for _ in range(client._events.qsize() + 50)]
        db = ReadStore(tmp_path)
        assert seqs == [e["seq"] for e in db.events_since(0, RUN, limit=len(seqs))]
        assert client.reconnects >= 1
        await client.close()
    finally:
        await shutdown(engine, server, task)


async def test_several_viewers(tmp_path):
    engine, server, info, task = await serve(tmp_path, RUN, interval=0.01)
    try:
        clients = [EngineClient(info.socket) for _ in range(3)]
        for c in clients:
            await c.connect(since=0)
        got = [[(await c.next_event(timeout=5))["seq"] for _ in range(20)] for c in clients]
        assert got[0] == got[1] == got[2]
        for c in clients:
            await c.close()
    finally:
        await shutdown(engine, server, task)
