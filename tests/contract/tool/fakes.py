"""A real local HTTP upstream for tool_svc tests (http.server in a thread), speaking plain HTTP/1.1."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeUpstream:
    """Routes by path; `counts[path]` counts requests (side effects) per path."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.bodies: list[Any] = []
        self.flaky_failures = 0
        self.slow_s = 2.0
        self.count_delay_s = 0.3
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, content_type: str = "application/json", **headers: str) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    for name, value in headers.items():
                        self.send_header(name.replace("_", "-"), value)
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _json(self, status: int, value: Any) -> None:
                self._send(status, json.dumps(value).encode())

            def do_GET(self) -> None:
                self._route(None)

            def do_HEAD(self) -> None:
                self._route(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                self._route(body)

            def _route(self, body: Any) -> None:
                path = self.path.split("?", 1)[0]
                with upstream._lock:
                    upstream.counts[path] += 1
                    count = upstream.counts[path]
                    upstream.bodies.append(body)
                if path == "/ok":
                    self._json(200, {"received": body, "count": count})
                elif path == "/big":
                    self._json(
                        200, {"items": [{"id": i, "status": "failed" if i % 7 == 0 else "ok"} for i in range(300)]}
                    )
                elif path == "/text":
                    self._send(
                        200, ("\n".join(f"line {i}: ok" for i in range(400)) + "\nERROR boom\n").encode(), "text/plain"
                    )
                elif path == "/404":
                    self._json(404, {"error": "no such resource"})
                elif path == "/500":
                    self._json(500, {"error": "internal"})
                elif path == "/400":
                    self._json(400, {"error": "bad request"})
                elif path == "/429":
                    self._send(429, b"slow down", "text/plain", Retry_After="7")
                elif path == "/302":
                    self._send(302, b"", "text/plain", Location="http://example.com/")
                elif path == "/slow":
                    time.sleep(upstream.slow_s)
                    self._json(200, {"slow": True})
                elif path == "/garbage":
                    self._send(200, b"<html>definitely not json", "text/html")
                elif path == "/latin1":
                    self._send(200, b"caf\xe9 cr\xe8me \xff\xfe", "application/json")
                elif path == "/empty":
                    self._send(200, b"", "application/json")
                elif path == "/secret":
                    self._json(
                        200,
                        {
                            "dsn": "postgres://app:hunter2@db.internal:5432/pay",
                            "api_key": "sk-live-abcdefghijklmnopqrstuv",
                            "note": "Authorization: Bearer Xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg0a",
                            "total_tokens": 42,
                        },
                    )
                elif path == "/count":
                    time.sleep(upstream.count_delay_s)
                    self._json(200, {"n": count})
                elif path == "/flaky":
                    with upstream._lock:
                        fail = upstream.flaky_failures > 0
                        upstream.flaky_failures -= 1 if fail else 0
                    if fail:
                        self._json(503, {"error": "try again"})
                    else:
                        self._json(200, {"ok": True, "count": count})
                elif path == "/nan":
                    self._send(200, b'{"value": NaN}', "application/json")
                elif path == "/wrong-shape":
                    self._json(200, {"unexpected": True})
                else:
                    self._json(404, {"error": f"no route {path}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-upstream", daemon=True
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> FakeUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def http_tool(name: str, upstream: FakeUpstream, path: str, **fields: Any) -> dict[str, Any]:
    """A `tools.registry` entry for an HTTP tool on the fake upstream."""
    entry: dict[str, Any] = {
        "name": name,
        "description": fields.pop("description", f"Use when testing {name}"),
        "input_schema": fields.pop(
            "input_schema",
            {"type": "object", "properties": {"q": {"type": "string"}}, "additionalProperties": True},
        ),
        "executor": "http",
        "endpoint_url": upstream.url(path),
        "permission": fields.pop("permission", {"group": "test", "access": "read"}),
        "timeout_s": fields.pop("timeout_s", 1.0),
    }
    entry.update(fields)
    return entry


FAST_RETRY = {"max_attempts": 3, "initial_backoff_s": 0.01, "max_backoff_s": 0.02, "max_jitter_s": 0.005}


class LocalHttpServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) for one handler class; `running()` serves it."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        self.thread.start()
        try:
            yield
        finally:
            self.server.shutdown()
            self.server.server_close()
