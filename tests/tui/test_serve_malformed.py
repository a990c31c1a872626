"""`cuco serve` meets malformed requests (garbage over HTTP, a WebSocket message that is not the page's
protocol): it serves on, says one line, and prints no traceback and never its token but in the address it
printed once, when it already listens."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
from storefill import fill_store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
    return got


async def _bad_websocket_messages(port: int, token: str) -> None:
    origin = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        for bad in ("not json {", '["resize", {}]', '{"no": "list"}'):
            async with session.ws_connect(f"ws://127.0.0.1:{port}/ws?token={token}", headers={"Origin": origin}) as ws:
                await ws.send_str(bad)
                await asyncio.wait_for(ws.receive(), 20)  # the server ends the tab's connection, or sends output


def test_malformed_requests_get_no_traceback_and_no_token(tmp_path: Path):
    fill_store(tmp_path, run_id="srv-1", n=4)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(tmp_path), "serve", "srv-1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert "?token=" in line, line
        token = line.split("?token=", 1)[1].split()[0]
        with socket.socket() as probe:  # the address is printed once the port listens, not before
            assert probe.connect_ex(("127.0.0.1", port)) == 0
        assert _raw(port, b"GET /\x00\x01 HTTP/9.9\r\nHost: \xff\r\n\r\n").startswith(b"HTTP/1.")
        assert _raw(port, b"\x16\x03\x01 not http at all\r\n\r\n").startswith(b"HTTP/1.")
        asyncio.run(_bad_websocket_messages(port, token))
        assert _raw(port, b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 403")  # it serves on
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert "Traceback" not in out, out
    assert token not in out, out
    assert all(line.startswith("cuco serve:") for line in out.splitlines()), out
