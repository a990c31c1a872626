"""A local HTTP server speaking the Anthropic Messages and OpenAI Chat Completions wire protocols,
with scripted answers (stdlib only: a ThreadingHTTPServer in a thread, bound to 127.0.0.1 port 0)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    input_tokens: int = 100
    output_tokens: int = 50
    body: dict[str, Any] | None = None  # raw JSON body (overrides the protocol answer)
    usage: bool = True


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt_text(self) -> str:
        parts = [str(self.body.get("system", ""))]
        for m in self.body.get("messages", []):
            c = m.get("content")
            parts.append(c if isinstance(c, str) else json.dumps(c))
        return "\n".join(parts)


def _answer(path: str, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    if reply.body is not None:
        return reply.body
    model = body.get("model", "fake")
    if path.endswith("/messages"):
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": reply.text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
        }
    if path.endswith("/embeddings"):
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else inputs
        data = [{"object": "embedding", "index": i, "embedding": _embed(t)} for i, t in enumerate(inputs)]
        return {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": reply.input_tokens, "total_tokens": reply.input_tokens},
        }
    out = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply.text}}],
    }
    if reply.usage:
        out["usage"] = {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }
    return out


def _embed(text: str) -> list[float]:
    """A deterministic bag-of-letters vector: equal texts embed equally."""
    vec = [0.0] * 26
    for ch in text.lower():
        if "a" <= ch <= "z":
            vec[ord(ch) - 97] += 1.0
    return vec


class FakeLLMServer:
    """`script` answers requests in order; when it runs out, `responder(request)` (if set) answers,
    else an empty text. `requests` records what came in (headers included, for key checks)."""

    def __init__(self, script: list[Reply] | None = None, responder: Callable[[Request], Reply] | None = None):
        self.script = list(script or [])
        self.responder = responder
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                req = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.requests.append(req)
                    reply = server.script.pop(0) if server.script else None
                if reply is None:
                    reply = server.responder(req) if server.responder else Reply()
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.status != 200:
                    payload = reply.body or {
                        "type": "error",
                        "error": {"type": "scripted_error", "message": f"scripted {reply.status}"},
                    }
                else:
                    payload = _answer(self.path, body, reply)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]
