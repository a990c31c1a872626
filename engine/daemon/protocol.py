"""The engine daemon's wire protocol and where a live run can be found.

A live engine writes `<home>/runs/<run_id>/run.json` (pid, socket path, protocol version) and listens on
a Unix socket (mode 0600) that speaks newline-delimited JSON, one object per line:

client -> daemon   {"op": "hello", "id": 1, "since": N, "events": true}
                   {"op": "pause" | "resume" | "stop" | "accept" | "reject" | "fork" | "status", "id": 2, ...}
daemon -> client   {"reply": 1, "ok": true, "protocol": 1, "run": ..., "status": {...}, "last_seq": M}
                   {"seq": 17, "run": ..., "ts": ..., "kind": "result", "data": {...}}   (an event)
                   {"reply": 2, "ok": false, "error": "...", "bad_input": true}   (the user's to fix)
                   {"ended": {"state": "finished", "reason": "reached 40 evaluations"}}
                                     (the engine's last word before it closes the socket: do not reconnect)

An event's `kind` and `data` are a record of engine/contract.py (`contract.decode` reads it back); a
status reply's `best` is a `BestRef` as a dict.

After `hello{since}` the daemon sends every event of the run with `seq > since` from the events table,
then live events, in `seq` order and without duplicates. A client that cannot keep up (its bounded
queue is full) is disconnected; it reconnects with `hello{since: last seq it saw}` and loses nothing.

This module has no dependencies beyond the standard library, so the TUI and the CLI can use it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 16 * 1024 * 1024  # one message; a replay is many messages
MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux; keep a margin
RUN_JSON = "run.json"
COMMANDS = ("hello", "pause", "resume", "stop", "accept", "reject", "fork", "strategy", "status")


class ProtocolError(ValueError):
    """A malformed message."""


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, default=str, separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    return message


def ended(state: str, reason: str) -> dict[str, Any]:
    """The message an ending engine sends every client last (the run's final state and why)."""
    return {"ended": {"state": state, "reason": reason}}


def is_event(message: dict[str, Any]) -> bool:
    return "seq" in message and "kind" in message and "reply" not in message


def run_dir(home: Path, run_id: str) -> Path:
    return Path(home) / "runs" / run_id


def run_json_path(home: Path, run_id: str) -> Path:
    return run_dir(home, run_id) / RUN_JSON


def socket_path_for(home: Path, run_id: str) -> Path:
    """`<home>/runs/<run>/engine.sock`, or a short path under the temp dir when that is too long."""
    path = run_dir(home, run_id).resolve() / "engine.sock"
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    short_dir = Path(tempfile.gettempdir()) / f"cuco-{os.getuid()}"
    return short_dir / f"{digest}.sock"


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    pid: int
    socket: str
    protocol: int
    started_at: float

    def to_json(self) -> str:
        return json.dumps(
            {
                "run": self.run_id,
                "pid": self.pid,
                "socket": self.socket,
                "protocol": self.protocol,
                "started_at": self.started_at,
            },
            indent=1,
        )


def write_run_info(home: Path, info: RunInfo) -> Path:
    """Atomically write run.json (readers never see half of it)."""
    dest = run_json_path(home, info.run_id)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{RUN_JSON}.{os.getpid()}.tmp")
    tmp.write_text(info.to_json())
    os.replace(tmp, dest)
    return dest


def read_run_info(home: Path, run_id: str) -> RunInfo | None:
    try:
        data = json.loads(run_json_path(home, run_id).read_text())
        return RunInfo(
            run_id=str(data["run"]),
            pid=int(data["pid"]),
            socket=str(data["socket"]),
            protocol=int(data["protocol"]),
            started_at=float(data.get("started_at", 0.0)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_run_info(home: Path, run_id: str, pid: int | None = None) -> None:
    """Remove run.json (only if it is ours when `pid` is given)."""
    info = read_run_info(home, run_id)
    if info is not None and pid is not None and info.pid != pid:
        return
    try:
        run_json_path(home, run_id).unlink()
    except FileNotFoundError:
        pass


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    # A zombie (our own exited child not yet reaped) counts as dead.
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (OSError, IndexError):
        return True


def live_run_info(home: Path, run_id: str) -> RunInfo | None:
    """run.json when it names a live process with a socket file (the socket may still refuse)."""
    info = read_run_info(home, run_id)
    if info is None or info.protocol != PROTOCOL_VERSION or not pid_alive(info.pid):
        return None
    if not Path(info.socket).exists():
        return None
    return info


def live_runs(home: Path) -> list[RunInfo]:
    runs = Path(home) / "runs"
    if not runs.is_dir():
        return []
    found = []
    for child in sorted(runs.iterdir()):
        info = live_run_info(home, child.name)
        if info is not None:
            found.append(info)
    return found


def wait_for_run_info(home: Path, run_id: str, timeout_s: float, pid: int | None = None) -> RunInfo | None:
    """Poll for a live run.json (used after spawning a daemon). Returns None on timeout or if `pid` dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = live_run_info(home, run_id)
        if info is not None and (pid is None or info.pid == pid):
            return info
        if pid is not None and not pid_alive(pid):
            return None
        time.sleep(0.05)
    return None
