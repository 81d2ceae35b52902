"""Two tool_svc processes sharing one Redis draw from one per-agent token bucket, and see one circuit
breaker per (instance, tool) (issue 28: failures on either replica open it for both)."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.supervisor import health_status
from agentmesh.dev.localredis import LocalRedis
from agentmesh.tokens import mint_token
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from tests.e2e.conftest import AUTH_KEY, free_port, spawn

pytestmark = pytest.mark.e2e

CAPACITY = 5
THRESHOLD = 2


@contextlib.contextmanager
def two_tool_services(process_env: dict[str, str], redis_url: str, tmp_path: Path, config: str) -> Iterator[list[int]]:
    """Starts two tool_svc processes on one Redis with `config`; yields their ports; stops them."""
    path = tmp_path / "agentmesh.yaml"
    path.write_text("environment: dev\nauth: {mode: enabled}\n" + config, encoding="utf-8")
    ports = [free_port(), free_port()]
    processes = []
    try:
        for i, port in enumerate(ports):
            env = {
                **process_env,
                "AGENTMESH_CONFIG": str(path),
                "AGENTMESH_REDIS_URL": redis_url,
                "AGENTMESH_SERVICES": json.dumps({"tool": {"host": "127.0.0.1", "port": port, "http_port": 0}}),
            }
            processes.append(spawn(["-m", "tool_svc"], env, tmp_path / f"tool-{i}.log"))
        for i, port in enumerate(ports):
            deadline = time.monotonic() + 60
            while health_status(f"127.0.0.1:{port}", timeout_s=1.0) != "SERVING":
                if processes[i].poll() is not None or time.monotonic() > deadline:
                    pytest.fail((tmp_path / f"tool-{i}.log").read_text())
                time.sleep(0.05)
        yield ports
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            assert process.wait(timeout=30) == 0


def execute(port: int, call_id: str, name: str, arguments: str, agent: str = "agent-a") -> common_pb2.ToolResult:
    token = mint_token(
        AUTH_KEY.encode(), subject=agent, agent_id=agent, roles=["agent"], permissions=["*:*:*"], ttl_s=300
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = tool_pb2_grpc.ToolServiceStub(channel).ExecuteTool(  # type: ignore[no-untyped-call]
            tool_pb2.ExecuteToolRequest(
                call=common_pb2.ToolCall(id=call_id, name=name, arguments_json=arguments), session_id="s1"
            ),
            metadata=((IDENTITY_HEADER, token),),
            timeout=30,
        )
    result: common_pb2.ToolResult = reply.result
    return result


class _Down(BaseHTTPRequestHandler):
    """An upstream that is down: every request counted and answered 503."""

    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "down"}')

    def log_message(self, *args: object) -> None:
        pass


def test_two_processes_share_the_rate_limit_bucket_and_the_circuit_breaker(
    process_env: dict[str, str], e2e_redis: LocalRedis, tmp_path: Path
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Down)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    config = (
        f"tools:\n  rate_limit: {{capacity: {CAPACITY}, refill_per_second: 0.001}}\n"
        f"  http_allowlist: ['{url}/']\n"
        f"  breaker: {{failure_threshold: {THRESHOLD}, open_s: 60}}\n"
        "  registry:\n"
        # A calculator that may wait for tool_svc's CPU pool to start on a loaded machine.
        "    - {name: calculator, executor: builtin, timeout_s: 30}\n"
        "    - {name: inventory, description: 'Use when asked for stock.', executor: http, method: GET,\n"
        "       input_schema: {type: object},\n"
        f"       endpoint_url: '{url}/stock', timeout_s: 10, retry: {{max_attempts: 1}}}}\n"
    )
    try:
        with two_tool_services(process_env, e2e_redis.url, tmp_path, config) as ports:
            # One bucket: the calls alternate between the processes, CAPACITY of them pass in all.
            outcomes = [
                execute(ports[n % 2], f"c{n}", "calculator", '{"expression": "2+2"}') for n in range(4 * CAPACITY)
            ]
            served = [r for r in outcomes if r.WhichOneof("outcome") == "output"]
            limited = [r for r in outcomes if r.WhichOneof("outcome") == "error"]
            assert len(served) == CAPACITY
            assert all(r.error.code == common_pb2.ERROR_CODE_RATE_LIMITED for r in limited)
            assert len(limited) == 3 * CAPACITY

            # One breaker: failures alternate between the processes, neither alone reaches the threshold.
            failed = [execute(ports[n % 2], f"f{n}", "inventory", "{}", "agent-b") for n in range(THRESHOLD)]
            assert [r.error.code for r in failed] == [common_pb2.ERROR_CODE_UPSTREAM_UNAVAILABLE] * THRESHOLD
            assert _Down.hits == THRESHOLD
            for n, port in enumerate(ports):
                refused = execute(port, f"r{n}", "inventory", "{}", "agent-b")
                assert refused.error.code == common_pb2.ERROR_CODE_CIRCUIT_OPEN, refused
            assert _Down.hits == THRESHOLD, "an open breaker sent nothing upstream, on either process"
    finally:
        server.shutdown()
        server.server_close()
