"""ServiceClients' unary-unary calls go through a DirectChannel (agentmesh.rpc.client_context, issue 45):
no grpc.aio interceptor task, the same call context as the interceptor gives every other call."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import grpc
import grpc.aio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agentmesh import callctx
from agentmesh.config import load_settings
from agentmesh.rpc.channels import ServiceClients
from agentmesh.telemetry import Telemetry
from agentmesh.v1 import tool_pb2


async def _tool_server(seen: list[tuple[dict[str, Any], float | None]]) -> tuple[grpc.aio.Server, int]:
    async def list_tools(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> tool_pb2.ListToolsResponse:
        seen.append((dict(context.invocation_metadata() or ()), context.time_remaining()))
        return tool_pb2.ListToolsResponse()

    handler = grpc.method_handlers_generic_handler(
        "agentmesh.v1.ToolService",
        {
            "ListTools": grpc.unary_unary_rpc_method_handler(
                list_tools,
                request_deserializer=tool_pb2.ListToolsRequest.FromString,
                response_serializer=tool_pb2.ListToolsResponse.SerializeToString,
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def test_a_stub_call_carries_the_call_context_and_leaves_the_callers_alone() -> None:
    seen: list[tuple[dict[str, Any], float | None]] = []
    server, port = await _tool_server(seen)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = cast(Telemetry, SimpleNamespace(tracer_provider=provider, metrics=None))
    settings = load_settings(
        overrides={"auth": {"mode": "disabled"}, "services": {"tool": {"host": "127.0.0.1", "port": port}}}
    )
    rid = callctx.request_id_var.set("outer-rid-1")
    token = callctx.identity_token_var.set("the-callers-token")
    try:
        async with ServiceClients(settings, telemetry=telemetry) as clients:
            await clients.tool().ListTools(tool_pb2.ListToolsRequest(), timeout=5)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await clients.tool().GetApproval(tool_pb2.GetApprovalRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert callctx.request_id_var.get() == "outer-rid-1"
        callctx.request_id_var.set(None)  # an edge call: the id is minted for the call, not for us
        async with ServiceClients(settings) as clients:
            await clients.tool().ListTools(tool_pb2.ListToolsRequest(), timeout=5)
        assert callctx.request_id_var.get() is None
    finally:
        callctx.identity_token_var.reset(token)
        callctx.request_id_var.reset(rid)
        await server.stop(None)
    metadata, remaining = seen[0]
    assert metadata[callctx.REQUEST_ID_HEADER] == "outer-rid-1"
    assert metadata[callctx.IDENTITY_HEADER] == "the-callers-token"
    assert metadata[callctx.ECHO_HEADER] == "0"
    assert "traceparent" in metadata
    assert remaining is not None and 0 < remaining <= 5
    assert len(seen[1][0][callctx.REQUEST_ID_HEADER]) == 32
    spans = {s.name: s for s in exporter.get_finished_spans()}
    listed, failed = spans["agentmesh.v1.ToolService/ListTools"], spans["agentmesh.v1.ToolService/GetApproval"]
    assert listed.kind == failed.kind == SpanKind.CLIENT
    assert listed.attributes is not None and listed.attributes["rpc.grpc.status_code"] == 0
    assert failed.attributes is not None and failed.attributes["rpc.grpc.status_code"] == 12
    assert metadata["traceparent"].split("-")[2] == format(listed.context.span_id, "016x")
