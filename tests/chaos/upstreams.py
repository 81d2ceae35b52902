"""The three counting HTTP upstreams of the chaos harness, on 127.0.0.1 in threads of the harness.

- `/put` (tool `put_effect`, PUT, idempotent): every request is counted; repeating one is harmless.
- `/post` (tool `post_effect`, POST, not idempotent): every request received is a side effect.
- `/keyed` (tool `keyed_effect`, POST, honours `Idempotency-Key`): a request whose key was seen
  before is not a new side effect and gets the first answer again; one without a key always is.

Every request is recorded at arrival, before the optional random delay (a request that arrived is a
side effect even if its answer never gets back): path, method, nonce (from the JSON body), the
`Idempotency-Key` header, and the time. With `slow_max_s` each answer waits a random 0..slow_max_s,
so kills land while calls are in flight.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = {"put_effect": "/put", "post_effect": "/post", "keyed_effect": "/keyed"}
"""Tool name -> upstream path."""
TOOL_OF_PATH = {path: tool for tool, path in PATHS.items()}


@dataclass(frozen=True)
class Request:
    path: str
    method: str
    nonce: str
    idempotency_key: str
    time_s: float


@dataclass
class Upstreams:
    """The recorder behind the three endpoints; `serve()` starts the HTTP server."""

    seed: int = 0
    slow_max_s: float = 0.0
    requests: list[Request] = field(default_factory=list)
    _answers: dict[str, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rng: random.Random = field(init=False)
    _server: ThreadingHTTPServer | None = None

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed ^ 0x0FF5E7)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- what happened --------------------------------------------------------------------------

    def of(self, path: str, nonce: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path and r.nonce == nonce]

    def effects(self, tool: str, nonce: str) -> int:
        """Side effects of the call with `nonce` on `tool`'s upstream: requests for /put and /post,
        distinct Idempotency-Keys (each request without one counts alone) for /keyed."""
        seen = self.of(PATHS[tool], nonce)
        if tool != "keyed_effect":
            return len(seen)
        return len({r.idempotency_key for r in seen if r.idempotency_key}) + sum(
            1 for r in seen if not r.idempotency_key
        )

    def nonces(self) -> dict[str, set[str]]:
        """Path -> every nonce it received."""
        found: dict[str, set[str]] = {path: set() for path in TOOL_OF_PATH}
        with self._lock:
            for r in self.requests:
                found.setdefault(r.path, set()).add(r.nonce)
        return found

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(r.path for r in self.requests)

    # -- serving --------------------------------------------------------------------------------

    def _handle(self, path: str, method: str, body: bytes, key: str) -> tuple[int, bytes]:
        try:
            data: Any = json.loads(body or b"{}")
        except ValueError:
            data = {}
        nonce = str(data.get("nonce", "")) if isinstance(data, dict) else ""
        with self._lock:
            self.requests.append(Request(path, method, nonce, key, time.time()))
            n = sum(1 for r in self.requests if r.path == path and r.nonce == nonce)
            delay = self._rng.uniform(0, self.slow_max_s) if self.slow_max_s > 0 else 0.0
            first = self._answers.get(key) if path == "/keyed" and key else None
        if delay:
            time.sleep(delay)
        if first is not None:
            return 200, first  # a repeated key: the first answer, no new effect
        answer = json.dumps({"ok": True, "path": path, "nonce": nonce, "received": n}).encode()
        if path == "/keyed" and key:
            with self._lock:
                answer = self._answers.setdefault(key, answer)
        return 200, answer

    def serve(self) -> Upstreams:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                if path not in TOOL_OF_PATH:
                    status, answer = 404, b'{"error": "no such path"}'
                else:
                    key = self.headers.get("Idempotency-Key") or ""
                    status, answer = recorder._handle(path, self.command, body, key)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass  # the caller was killed meanwhile: the effect stands

            do_PUT = do_POST = do_GET = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, name="chaos-upstreams", daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
