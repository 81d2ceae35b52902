"""The demo's fake ops world: an HTTP "ops API" the demo's HTTP tools call, and a large service log.

`OpsApi` is a real local HTTP server (stdlib, one thread) speaking JSON, with the endpoints the
ops-troubleshooting scenario's tools point at (agentmesh.yaml `tools.registry`, base URL from
$DEMO_OPS_API_URL):

    POST /ops/metrics     latency / error-rate figures of a service
    POST /ops/deployment  a deployment, or 404 when the registry does not know the service (ENGINEERING)
    POST /ops/pods        the service's pods (the fallback of /ops/deployment)
    POST /ops/restart     restarts a service: a side effect, counted
    POST /ops/shell       runs a command on a host: never reached in the demo (the danger guard stops it)
    POST /notify          a side effect for crash tests: records (seq, nonce), counted

`python -m agentmesh.cli.demo_ops --host 0.0.0.0 --port 18080 --logs-dir DIR` serves it alone (the
compose demo profile's `demo-ops` service), after writing the demo's service log into DIR.

Every request is recorded (`calls`), so tests check that each side effect ran exactly once. A test
may make the next requests to a path stall (`OpsState.stall`): with their effect (recorded, then slow),
or lost (never recorded, the connection dropped): an upstream whose outcome the caller cannot know.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

OPS_URL_ENV = "DEMO_OPS_API_URL"
LOGS_DIR_ENV = "DEMO_LOGS_DIR"
"""Where the demo overlay's query_logs reads (agentmesh.demo.yaml `tools.logs_dir`)."""


@dataclass
class OpsState:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stalls: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)
    spans: list[tuple[str, dict[str, Any], float, float]] = field(default_factory=list)
    """Each answered request's path, body, and monotonic start and end: what ran at once (a cap's test)."""

    def stall(self, path: str, seconds: float, *, effect: bool) -> None:
        """The next request to `path` hangs `seconds`: recorded first (`effect`), or lost and dropped."""
        with self.lock:
            self.stalls.setdefault(path, []).append((seconds, effect))

    def next_stall(self, path: str) -> tuple[float, bool] | None:
        with self.lock:
            queue = self.stalls.get(path)
            return queue.pop(0) if queue else None

    def record(self, path: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append((path, body))
            self.counts[path] += 1

    def span(self, path: str, body: dict[str, Any], start: float) -> None:
        with self.lock:
            self.spans.append((path, body, start, time.monotonic()))

    def bodies(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for p, body in self.calls if p == path]


def _metrics(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    service = str(body.get("service", "payment-svc"))
    return 200, {
        "service": service,
        "metric": body.get("metric", "latency_p99"),
        "window": body.get("window", "15m"),
        "latency_p50_ms": 180,
        "latency_p99_ms": 4870,
        "error_rate": 0.124,
        "db_pool_in_use": "100/100",
        "since": "2025-06-01T09:42:00Z",
    }


def _pods(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    service = str(body.get("service", "payment-svc"))
    return 200, {
        "service": service,
        "pods": [
            {"name": f"{service}-7d9f8-x2k4q", "status": "Running", "restarts": 7, "db_connections": "50/50"},
            {"name": f"{service}-7d9f8-m8p1z", "status": "Running", "restarts": 6, "db_connections": "50/50"},
        ],
    }


class OpsApi:
    """The fake ops API on 127.0.0.1 (port 0: any free port; another `host` for the compose demo profile)."""

    def __init__(self, port: int = 0, known_deployments: frozenset[str] = frozenset(), host: str = "127.0.0.1") -> None:
        """`known_deployments`: services /ops/deployment knows; every other one is a 404."""
        self.state = OpsState()
        state = self.state

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the demo prints what matters

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                if not isinstance(body, dict):
                    body = {"_value": body}
                path = self.path.split("?", 1)[0]
                start = time.monotonic()
                stall = state.next_stall(path)
                if stall is not None and not stall[1]:
                    time.sleep(stall[0])  # lost: no effect, no answer
                    self.close_connection = True
                    return
                state.record(path, body)
                if stall is not None:
                    time.sleep(stall[0])
                if path == "/ops/metrics":
                    self._reply(*_metrics(body))
                elif path == "/ops/deployment":
                    service = str(body.get("service", "?"))
                    if service in known_deployments:
                        self._reply(200, {"service": service, "image": f"{service}:2025.06.1", "replicas": 2})
                    else:
                        self._reply(404, {"error": f"deployment {service} not found in registry v2"})
                elif path == "/ops/pods":
                    self._reply(*_pods(body))
                elif path == "/ops/restart":
                    self._reply(200, {"service": body.get("service"), "restarted": True, "new_pods": 2})
                elif path == "/ops/shell":
                    self._reply(200, {"exit_code": 0, "stdout": ""})
                elif path == "/notify":
                    self._reply(200, {"ack": body.get("seq"), "nonce": body.get("nonce")})
                else:
                    self._reply(404, {"error": f"no route {path}"})
                state.span(path, body, start)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = str(self.server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.server.server_address[1]}"

    def start(self) -> OpsApi:
        self._thread = threading.Thread(target=self.server.serve_forever, name="ops-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OpsApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_service_log(logs_dir: Path, service: str = "payment-svc", target_bytes: int = 200_000) -> Path:
    """A ~200 KB log for `service` (text lines `<ts> LEVEL [service] message`), seeded: mostly INFO,
    some WARN, and the ERROR lines that tell the story (the DB connection pool is exhausted)."""
    rng = random.Random(20250601)
    logs_dir.mkdir(parents=True, exist_ok=True)
    path = logs_dir / f"{service}.log"
    start = dt.datetime(2025, 6, 1, 9, 0, tzinfo=dt.UTC)
    lines: list[str] = []
    size = 0
    i = 0
    while size < target_bytes:
        ts = (start + dt.timedelta(milliseconds=1700 * i)).isoformat().replace("+00:00", "Z")
        order = f"ORD-2025-{rng.randint(1, 9999):04d}"
        roll = rng.random()
        if i > 1400 and roll < 0.02:
            message = (
                f"ERROR [{service}] db connection pool exhausted (100/100 in use); request {order} "
                "timed out after 5000 ms"
            )
            level_line = f"{ts} {message}"
        elif roll < 0.08:
            level_line = f"{ts} WARN [{service}] slow upstream call to ledger-svc took {rng.randint(800, 2400)} ms"
        else:
            level_line = (
                f"{ts} INFO [{service}] processed payment {order} amount={rng.randint(5, 900)}.00 EUR "
                f"in {rng.randint(20, 180)} ms"
            )
        lines.append(level_line)
        size += len(level_line) + 1
        i += 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Serves the fake ops API until SIGTERM or Ctrl-C (the compose demo profile)."""
    import argparse
    import contextlib
    import signal

    parser = argparse.ArgumentParser(prog="python -m agentmesh.cli.demo_ops", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--logs-dir", type=Path, default=None, help="write the demo's payment-svc log here")
    args = parser.parse_args(argv)
    if args.logs_dir is not None:
        print(f"wrote {write_service_log(args.logs_dir)}", flush=True)
    api = OpsApi(args.port, host=args.host)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with api:
        print(f"ops API on {args.host}:{api.server.server_address[1]}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
