"""One trace from the CLI to every upstream (issue 42): the four services as processes exporting spans over
OTLP/HTTP to a local receiver that also serves Jaeger v2's query API (tests/otlp_http.py), an agent on an
OpenAI-compatible model server (the fake checked against the `openai` SDK's types), an HTTP tool server and an
MCP server over streamable HTTP (the official SDK's), each recording the headers it was sent.

`agentmesh run` (a process, exporting its own spans) runs a task whose model calls the HTTP tool, the MCP
tool and an HTTP tool that answers 503, then answers. Then:
- one trace (the CLI's) holds the CLIENT spans of the model server, HTTP tool and MCP calls, with the HTTP
  semantic conventions, and the failed call's span has `error.type` "503";
- every upstream saw `traceparent` in that trace, naming the CLIENT span that sent it, and the CLI's request id;
- `agentmesh trace <task>` draws that trace from the receiver's query API (no span file exists).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentmesh.dev.localredis import LocalRedis
from agentmesh.semconv import ATTR_REQUEST_ID
from tests.contract.provider.fakes import FakeProvider, Reply
from tests.e2e.conftest import AUTH_KEY, REPO, free_ports, service_json, wait_for
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Mesh
from tests.otlp_http import OtlpHttpReceiver, ReceivedSpan

pytestmark = pytest.mark.e2e
TASK_ID = "traced-task-1"


class ToolServer:
    """An HTTP tool upstream: POST /forecast answers JSON, POST /broken 503; every request's headers kept."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                status, body = (200, b'{"tomorrow": "snow"}') if self.path == "/forecast" else (503, b"down")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _config(tmp: Path, tools_url: str, mcp_url: str, model_url: str) -> Path:
    """Additions to the packaged defaults (they layer on them): the model server, the tools, the agent."""
    config = {
        "providers": {
            "backends": [
                {
                    "name": "local",
                    "type": "openai",
                    "base_url": model_url,
                    "api_key": "sk-traced-test-key-0123456789",
                    "retry": {"max_retries": 0},
                    "models": [{"name": "m1"}],
                }
            ]
        },
        "tools": {
            "http_allowlist": [tools_url + "/", mcp_url],
            "retry": {"max_attempts": 1},
            "registry": [
                {
                    "name": name,
                    "description": f"The {name} of a city.",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                    "permission": {"group": "weather", "access": "read"},
                    "endpoint_url": f"{tools_url}/{name}",
                }
                for name in ("forecast", "broken")
            ],
            "mcp_servers": [{"name": "upstream", "transport": "http", "url": mcp_url, "trust_annotations": True}],
        },
        "agents": [
            {
                "id": "traced",
                "model": "local/m1",
                "tools": ["forecast", "broken", "upstream__echo_text"],
                "permissions": ["*:weather:read", "*:mcp.upstream:read"],
                "max_steps": 6,
            }
        ],
    }
    path = tmp / "traced.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[tuple[ToolServer, FakeProvider, str, Path]]:
    port = free_ports(["mcp"])["mcp"]
    headers_log = tmp_path / "mcp-headers.jsonl"
    mcp = subprocess.Popen(
        [sys.executable, str(REPO / "tests/contract/tool/mcp_upstream.py"), "--transport", "http", "--port",
         str(port), "--effects", str(tmp_path / "effects.txt"), "--headers-log", str(headers_log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    tools = ToolServer()
    model = FakeProvider("openai").start()
    try:
        import socket

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, timeout_s=30)
        yield tools, model, f"http://127.0.0.1:{port}/mcp", headers_log
    finally:
        model.stop()
        tools.close()
        mcp.terminate()
        mcp.wait(timeout=10)


def _traceparent(value: str) -> tuple[str, str]:
    version, trace_id, span_id, _flags = value.split("-")
    assert version == "00" and len(trace_id) == 32 and len(span_id) == 16
    return trace_id, span_id


Upstreams = tuple[ToolServer, FakeProvider, str, Path]


def test_one_trace_reaches_every_upstream(tmp_path: Path, upstreams: Upstreams) -> None:
    tools, model, mcp_url, mcp_headers = upstreams
    model.push(
        Reply(text="", tool_calls=[("forecast", '{"city": "Oslo"}')]),
        Reply(text="", tool_calls=[("upstream__echo_text", '{"text": "hi"}')]),
        Reply(text="", tool_calls=[("broken", '{"city": "Oslo"}')]),
        Reply(text="Snow tomorrow in Oslo."),
    )
    ports = free_ports(SERVICE_ORDER)
    with LocalRedis() as redis, OtlpHttpReceiver() as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
        env |= {
            # The checkout's agentmesh_client too (`agentmesh run` streams with it), as pytest's pythonpath.
            "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "clients" / "python"))),
            "AGENTMESH_CONFIG": str(_config(tmp_path, tools.url, mcp_url, model.base_url)),
            "AGENTMESH_AUTH_KEY": AUTH_KEY,
            "AGENTMESH_REDIS_URL": redis.url,
            "AGENTMESH_SERVICES": service_json(ports),
            "AGENTMESH_SERVER_DRAIN_DELAY_S": "0",
            "AGENTMESH_SERVER_GRACE_PERIOD_S": "2",
            "AGENTMESH_TELEMETRY_SPAN_FILE": str(tmp_path / "no-such-dir" / "spans.jsonl"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRICS_EXPORTER": "none",
        }
        mesh = Mesh(env=env, ports=ports, tmp=tmp_path)
        try:
            for name in SERVICE_ORDER:
                mesh.start(name)
            run = subprocess.run(
                [sys.executable, "-m", "agentmesh.cli", "run", "traced", "What is the forecast for Oslo?",
                 "--task-id", TASK_ID],
                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert run.returncode == 0, run.stdout + run.stderr
            assert f"task {TASK_ID}: SUCCEEDED" in run.stdout

            def cli_root() -> ReceivedSpan | None:
                return next((s for s in receiver.spans() if s.name == "agentmesh run"), None)

            wait_for(lambda: cli_root() is not None, timeout_s=30)
            root = cli_root()
            assert root is not None
            trace_id, request_id = root.trace_id, str(root.attributes[ATTR_REQUEST_ID])

            def upstream_spans() -> list[ReceivedSpan]:
                return [s for s in receiver.spans() if s.trace_id == trace_id and s.kind == "CLIENT"]

            def every_call_exported() -> bool:
                urls = [str(s.attributes.get("url.full", "")) for s in upstream_spans()]
                return (
                    any(u.endswith("/forecast") for u in urls)
                    and any(u.endswith("/broken") for u in urls)
                    and any(u.endswith("/chat/completions") for u in urls)
                    and any(u == mcp_url for u in urls)
                )

            wait_for(every_call_exported, timeout_s=30)
            spans = upstream_spans()
            by_id = {s.span_id: s for s in receiver.spans() if s.trace_id == trace_id}

            def http_span(suffix: str) -> ReceivedSpan:
                return next(s for s in spans if str(s.attributes.get("url.full", "")).endswith(suffix))

            # The HTTP semantic conventions on each upstream call's CLIENT span.
            expected = (("/forecast", "tool_svc"), ("/chat/completions", "provider_svc"), ("/mcp", "tool_svc"))
            for suffix, service in expected:
                span = http_span(suffix)
                assert span.service == service and span.name == "POST"
                assert span.attributes["http.request.method"] == "POST"
                assert span.attributes["server.address"] == "127.0.0.1"
                assert isinstance(span.attributes["server.port"], int)
                assert span.attributes["http.response.status_code"] == 200
                assert "error.type" not in span.attributes
                assert span.attributes[ATTR_REQUEST_ID] == request_id
            failed = http_span("/broken")
            assert failed.attributes["http.response.status_code"] == 503
            assert failed.attributes["error.type"] == "503" and failed.status_code == 2  # STATUS_CODE_ERROR
            # The MCP call: a `tools/call` CLIENT span (MCP conventions) above its HTTP span.
            mcp_call = next(s for s in spans if s.name == "tools/call Echo.Text")
            assert mcp_call.attributes["mcp.method.name"] == "tools/call"
            assert mcp_call.attributes["gen_ai.tool.name"] == "Echo.Text"
            assert http_span("/mcp").parent_span_id == mcp_call.span_id
            # The failed tool call's execute_tool span says what failed too.
            executed = [s for s in by_id.values() if s.name == "execute_tool broken"]
            assert executed and executed[0].attributes["error.type"] == "UPSTREAM_UNAVAILABLE"

            # Every upstream saw the trace (the span that sent the request) and the request id.
            sent = {s.span_id for s in spans if s.name == "POST"}
            for path, headers in tools.seen:
                seen_trace, seen_span = _traceparent(headers["traceparent"])
                assert (seen_trace, headers["x-request-id"]) == (trace_id, request_id), path
                assert seen_span in sent
            model_requests = model.requests()
            assert len(model_requests) == 4
            for request in model_requests:
                seen_trace, seen_span = _traceparent(request.headers["traceparent"])
                assert (seen_trace, request.headers["x-request-id"]) == (trace_id, request_id)
                assert seen_span in sent
            calls = [json.loads(line) for line in mcp_headers.read_text(encoding="utf-8").splitlines()]
            traced = [c for c in calls if c["traceparent"]]
            assert traced, calls  # the tools/call POST (listings made outside a call carry none)
            for call in traced:
                assert _traceparent(call["traceparent"])[0] == trace_id and call["x-request-id"] == request_id

            # `agentmesh trace <task>` reads it back from the query API (there is no span file).
            shown = subprocess.run(
                [sys.executable, "-m", "agentmesh.cli", "trace", TASK_ID],
                env={**env, "AGENTMESH_TELEMETRY_TRACE_QUERY_URL": receiver.url},
                cwd=tmp_path, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert shown.returncode == 0, shown.stderr
            assert f"from {receiver.url}" in shown.stdout and f"trace {trace_id}" in shown.stdout
            for label in ("agentmesh run", "tools/call Echo.Text", "execute_tool broken", "POST [provider_svc CLIENT]"):
                assert label in shown.stdout, shown.stdout
            assert any(q.startswith("/api/v3/traces?") for q in receiver.queries)
        finally:
            for process in mesh.processes.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            mesh.stop_all()
