"""`cuco serve`: loopback by default; another address needs --public and says why, and is still guarded by the
token; a busy port is named."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from storefill import fill_store


def _serve(home: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(home), "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kw,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str, headers: str = "") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n{headers}\r\n".encode())
        page = b""
        while chunk := conn.recv(65536):
            page += chunk
    return page


def test_a_non_loopback_host_needs_public_and_says_why(tmp_path):
    fill_store(tmp_path, run_id="srv-1", n=4)
    refused = _serve(tmp_path, "--host", "0.0.0.0")
    out, _ = refused.communicate(timeout=60)
    assert refused.returncode == 2
    assert "--host" in out and "not a loopback address" in out and "ssh -L" in out and "--public" in out
    assert "Traceback" not in out

    port = _free_port()
    nowhere = _serve(tmp_path, "srv-1", "--host", "0.0.0.0", "--port", str(port), "--public")
    out, _ = nowhere.communicate(timeout=60)  # listening everywhere, the page needs the address browsers use
    assert nowhere.returncode == 2 and "--public-url" in out and "Traceback" not in out
    public = _serve(
        tmp_path,
        "srv-1",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--public",
        "--public-url",
        f"http://127.0.0.1:{port}",
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            raise AssertionError("cuco serve --public did not listen")
        printed = [public.stdout.readline()]
        while "?token=" not in printed[-1]:
            printed.append(public.stdout.readline())
        token = printed[-1].split("?token=", 1)[1].split()[0]
        assert _get(port, "/").startswith(b"HTTP/1.0 403")  # public, and still nobody's without the token
        first = _get(port, f"/?token={token}")
        assert first.startswith(b"HTTP/1.0 303") and b"HttpOnly" in first and b"SameSite=Strict" in first
        page = _get(port, "/", f"Cookie: cuco_serve_token={token}\r\n")
        assert page.startswith(b"HTTP/1.0 200") and b"/ws" in page
    finally:
        os.killpg(public.pid, 15)
        out, _ = public.communicate(timeout=30)
    out = "".join(printed) + out
    assert "WARNING" in out and "without TLS" in out

    with socket.socket() as busy:  # a port already taken: named, exit 2
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = _serve(tmp_path, "srv-1", "--port", str(busy.getsockname()[1]))
        out, _ = taken.communicate(timeout=60)
    assert taken.returncode == 2 and "--port" in out and "pick another" in out
