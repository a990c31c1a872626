"""A viewer whose engine dies between two requests is told so (EngineGone), never handed a raw socket error.

The engine here is a real Unix-socket peer that says hello and then closes its end while the viewer's event
loop is blocked, so the viewer's next request writes into a socket whose other end is already gone: the
moment a SIGKILLed engine leaves an attached viewer in.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest

from cuco_tui.client import EngineClient, EngineGone
from engine.daemon import protocol


def _engine_that_dies(path: Path, close_now: threading.Event) -> threading.Thread:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            hello = protocol.decode(conn.makefile("rb").readline())
            reply = {"ok": True, "reply": hello["id"], "protocol": protocol.PROTOCOL_VERSION, "last_seq": 0}
            conn.sendall(protocol.encode(reply))
            close_now.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(60)
def test_request_to_an_engine_that_died_raises_engine_gone(tmp_path: Path):
    path = tmp_path / "engine.sock"
    close_now = threading.Event()
    engine = _engine_that_dies(path, close_now)

    async def scenario() -> float:
        client = EngineClient(path, connect_timeout=2.0, reconnect_attempts=2, reconnect_delay=0.05)
        await client.connect(since=0)
        close_now.set()
        engine.join(10)  # blocks the loop: the viewer has not read the close when it writes
        time.sleep(0.2)
        started = time.monotonic()
        try:
            with pytest.raises(EngineGone):
                await client.request("status", timeout=5)
            with pytest.raises(EngineGone):  # and again, once the viewer knows (no hang, no raw OSError)
                await client.request("status", timeout=5)
        finally:
            await client.close()
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 15
