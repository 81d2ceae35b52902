"""Spans and metrics by the conventions, read from a local OTLP/HTTP receiver (tests/otlp_http.py): a real
tool_svc and a caller on agentmesh's channels, both exporting over HTTP/protobuf as the standard OTEL_*
variables say; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the names agentmesh gives."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh import callctx
from agentmesh.config import ConfigError, Settings
from agentmesh.rpc.channels import create_channel, server_attributes
from agentmesh.rpc.telemetry import OTLP, otlp_protocol
from agentmesh.semconv import ATTR_REQUEST_ID
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from tests.contract.tool.conftest import ALL, base_overrides
from tests.contract.tool.fakes import FakeUpstream
from tests.otlp_http import OtlpHttpReceiver
from tool_svc.server import SPEC

EXECUTE = "agentmesh.v1.ToolService/ExecuteTool"
OTLP_STATUS_ERROR = 2


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpHttpReceiver]:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    with OtlpHttpReceiver() as running:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp,prometheus")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")
        yield running


async def test_spans_and_metrics_over_otlp_http_follow_the_conventions(
    receiver: OtlpHttpReceiver,
    start_service: Callable[..., Awaitable[Any]],
    upstream: FakeUpstream,
    logs_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The operator's names, for the tool service only (the SDK reads them when a resource is made).
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tools-eu")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=overridden,deployment.environment.name=contract")
    svc = await start_service(SPEC, base_overrides(upstream, logs_dir))
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    settings: Settings = svc.settings
    caller = setup_telemetry("caller_svc", settings, otlp=OTLP, configure_logs=False)
    assert svc.host.telemetry.service_name == "tools-eu" and caller.service_name == "caller_svc"
    channel = create_channel(svc.target, settings, telemetry=caller)
    try:
        stub = tool_pb2_grpc.ToolServiceStub(channel)  # type: ignore[no-untyped-call]
        token = svc.token(("agent",), agent_id="agent-a", instance="agent-a-1", permissions=list(ALL))
        reply = await stub.ExecuteTool(
            tool_pb2.ExecuteToolRequest(
                call=common_pb2.ToolCall(id="c1", name="get_ok", arguments_json='{"q": "x"}'), session_id="s-1"
            ),
            metadata=((callctx.IDENTITY_HEADER, token), (callctx.REQUEST_ID_HEADER, "req-otlp-http")),
        )
        assert reply.result.HasField("output")
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # no token: the edge refuses it
            await stub.ListTools(tool_pb2.ListToolsRequest())
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close(None)
    await asyncio.to_thread(caller.force_flush)
    await asyncio.to_thread(svc.host.telemetry.force_flush)
    receiver.wait_for(lambda: any(s.kind == "CLIENT" for s in receiver.spans()))
    await asyncio.to_thread(caller.shutdown)

    assert "/v1/traces" in receiver.paths and receiver.content_types == {"application/x-protobuf"}
    spans = receiver.spans()
    assert not [s.name for s in spans if s.name.startswith("/")], "span names have no leading slash"
    (server,) = [s for s in spans if s.name == EXECUTE and s.kind == "SERVER"]
    (client,) = [s for s in spans if s.name == EXECUTE and s.kind == "CLIENT"]

    # OTEL_SERVICE_NAME wins over our name and over service.name in OTEL_RESOURCE_ATTRIBUTES; the rest of
    # OTEL_RESOURCE_ATTRIBUTES is kept.
    assert server.service == "tools-eu" and client.service == "caller_svc"
    assert server.resource["deployment.environment.name"] == "contract"
    assert server.resource["service.version"]

    assert server.attributes["rpc.system"] == client.attributes["rpc.system"] == "grpc"
    assert server.attributes["rpc.service"] == client.attributes["rpc.service"] == "agentmesh.v1.ToolService"
    assert server.attributes["rpc.method"] == client.attributes["rpc.method"] == "ExecuteTool"
    assert server.attributes["rpc.grpc.status_code"] == client.attributes["rpc.grpc.status_code"] == 0
    assert server.attributes["network.peer.address"] == "127.0.0.1"
    assert isinstance(server.attributes["network.peer.port"], int) and server.attributes["network.peer.port"] > 0
    # The client span says where it called, the port as an int (RPC semantic conventions).
    assert client.attributes["server.address"] == "127.0.0.1"
    assert client.attributes["server.port"] == svc.host.port
    assert type(client.attributes["server.port"]) is int
    # One trace: the server span is the client span's child; one request id on both.
    assert server.trace_id == client.trace_id and server.parent_span_id == client.span_id
    assert server.attributes[ATTR_REQUEST_ID] == client.attributes[ATTR_REQUEST_ID] == "req-otlp-http"

    # A call the edge refused for its token: the status it answered, and no server-error status.
    (rejected,) = [s for s in spans if s.name == "agentmesh.v1.ToolService/ListTools" and s.kind == "SERVER"]
    assert rejected.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNAUTHENTICATED.value[0]
    assert rejected.status_code != OTLP_STATUS_ERROR

    # Metrics over OTLP/HTTP too (OTEL_METRICS_EXPORTER=otlp,prometheus), every OTEL_METRIC_EXPORT_INTERVAL.
    def exported() -> list[tuple[str, dict[str, Any], Any]]:
        return [
            (service, attributes, point)
            for service, name, attributes, point in receiver.metric_points()
            if name == "rpc.server.call.duration" and attributes.get("rpc.method") == "ExecuteTool"
        ]

    receiver.wait_for(lambda: bool(exported()))
    assert "/v1/metrics" in receiver.paths
    service, attributes, point = exported()[-1]
    assert service == "tools-eu" and attributes["rpc.grpc.status_code"] == 0 and point.count >= 1
    names = {name for _, name, _, _ in receiver.metric_points()}
    assert {"agentmesh.tool.calls", "db.client.operation.duration"} <= names


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "grpc"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "http/protobuf"),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
            "http/protobuf",
        ),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": " HTTP/PROTOBUF "}, "http/protobuf"),
    ],
)
def test_the_protocol_follows_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    assert otlp_protocol("TRACES") == expected
    exporter = OTLP.span_exporter()
    try:
        wanted = "http" if expected == "http/protobuf" else "grpc"
        assert type(exporter).__module__ == f"opentelemetry.exporter.otlp.proto.{wanted}.trace_exporter"
    finally:
        exporter.shutdown()


@pytest.mark.parametrize("value", ["http/json", "thrift", "grpcs"])
def test_an_unsupported_protocol_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", value)
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"):
        OTLP.metric_exporter()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("127.0.0.1:50053", {"server.address": "127.0.0.1", "server.port": 50053}),
        ("dns:///agentmesh-tool:50053", {"server.address": "agentmesh-tool", "server.port": 50053}),
        (
            "dns://10.0.0.10:53/agentmesh-tool.ns.svc:50053",
            {"server.address": "agentmesh-tool.ns.svc", "server.port": 50053},
        ),
        ("ipv4:10.0.0.1:5000,10.0.0.2:5000", {"server.address": "10.0.0.1", "server.port": 5000}),
        ("ipv6:[::1]:5000", {"server.address": "::1", "server.port": 5000}),
        ("[2001:db8::1]:443", {"server.address": "2001:db8::1", "server.port": 443}),
        ("agentmesh-tool", {"server.address": "agentmesh-tool"}),
        ("unix:///run/tool.sock", {}),
        ("", {}),
    ],
)
def test_client_spans_name_the_server_of_any_target(target: str, expected: dict[str, Any]) -> None:
    assert server_attributes(target) == expected
