"""Hostile JSON text through the real services (issue 19): every bad value is INVALID_ARGUMENT naming
its field, checked before use (server.max_json_depth by a bracket scan before parsing); tool
arguments stay in-band CONTRACT errors. Before the fixes these were INTERNAL or UNKNOWN."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.rpc.status import rich_details
from agentmesh.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)
from context_svc.server import SPEC as CONTEXT_SPEC
from provider_svc.server import SPEC as PROVIDER_SPEC
from tests.conftest import RunningService
from tool_svc.server import SPEC as TOOL_SPEC

Start = Callable[..., Awaitable[RunningService]]
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 20_000 + "{}" + "}" * 20_000
DEEP_SCHEMA = '{"type": "object", "properties": {"x": ' * 20_000 + "{}" + "}}" * 20_000


def _admin(svc: RunningService) -> Any:
    return svc.metadata(roles=("agent", "admin"), agent_id="fuzz", permissions=["*:*:*"])


def _generate(**fields: Any) -> provider_pb2.GenerateRequest:
    return provider_pb2.GenerateRequest(
        model="scripted/default",
        messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content="hello")],
        **fields,
    )


async def _invalid(call: Awaitable[Any]) -> tuple[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    rich = rich_details(info.value)
    assert rich.bad_request is not None
    return rich.bad_request.field_violations[0].field, info.value.details() or ""


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (DEEP_ARRAY, "deeper than 64"),
        (DEEP_OBJECT, "deeper than 64"),
        ('{"type": "object", "description": "\\ud800"}', "valid Unicode"),
        ('{"a": NaN}', "is not JSON"),
    ],
)
async def test_generate_response_schema_json(start_service: Start, text: str, reason: str) -> None:
    svc = await start_service(PROVIDER_SPEC)
    stub = provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    field, details = await _invalid(stub.Generate(_generate(response_schema_json=text), metadata=_admin(svc)))
    assert field == "response_schema_json" and reason in details
    # And in a tool's input schema, through the streaming RPC too.
    tools = [common_pb2.ToolSpec(name="t", description="d", input_schema_json=text)]
    request = provider_pb2.GenerateStreamRequest(request=_generate(tools=tools))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stub.GenerateStream(request, metadata=_admin(svc), timeout=10):
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert "tools[0].input_schema_json" in (info.value.details() or "")


async def test_the_depth_limit_is_configured(start_service: Start) -> None:
    svc = await start_service(PROVIDER_SPEC, {"server": {"max_json_depth": 3}})
    stub = provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    ok = '{"type": "object", "properties": {"a": {}}}'  # depth 3
    await stub.Generate(_generate(response_schema_json=ok), metadata=_admin(svc), timeout=10)
    deeper = '{"type": "object", "properties": {"a": {"items": {}}}}'
    field, details = await _invalid(stub.Generate(_generate(response_schema_json=deeper), metadata=_admin(svc)))
    assert field == "response_schema_json" and "deeper than 3" in details


def _tool(input_schema_json: str, output_schema_json: str = "") -> common_pb2.ToolSpec:
    return common_pb2.ToolSpec(
        name="fuzz_tool",
        description="use when fuzzing",
        input_schema_json=input_schema_json,
        output_schema_json=output_schema_json,
        permission=common_pb2.ToolPermission(environment="dev", group="fuzz", access=common_pb2.ACCESS_MODE_READ),
        executor="http",
        endpoint_url="http://127.0.0.1:9/x",
    )


@pytest.mark.parametrize(
    ("input_schema", "output_schema", "field", "reason"),
    [
        (DEEP_SCHEMA, "", "tool.input_schema_json", "deeper than 64"),
        (DEEP_OBJECT, "", "tool.input_schema_json", "deeper than 64"),
        ('{"type": "object"}', DEEP_ARRAY, "tool.output_schema_json", "deeper than 64"),
        ('{"type": "object", "description": "\\udfff"}', "", "tool.input_schema_json", "valid Unicode"),
        ('{"type": "object", "properties": {"\\ud800": {}}}', "", "tool.input_schema_json", "valid Unicode"),
    ],
)
async def test_register_tool_schemas(
    start_service: Start, input_schema: str, output_schema: str, field: str, reason: str
) -> None:
    svc = await start_service(TOOL_SPEC, {"tools": {"http_allowlist": ["http://127.0.0.1:9/"]}})
    stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    request = tool_pb2.RegisterToolRequest(tool=_tool(input_schema, output_schema))
    got, details = await _invalid(stub.RegisterTool(request, metadata=_admin(svc), timeout=10))
    assert got == field and reason in details
    # Nothing was stored that a later ListTools could not carry back.
    listed = await stub.ListTools(tool_pb2.ListToolsRequest(), metadata=_admin(svc), timeout=10)
    assert "fuzz_tool" not in [t.name for t in listed.tools]


@pytest.mark.parametrize(
    "arguments", ['{"expression": "\\ud800"}', '{"expression": "1+\\uDFFF"}', '{"\\ud800": "1+1"}']
)
async def test_a_lone_surrogate_in_tool_arguments_is_an_in_band_contract_error(
    start_service: Start, arguments: str
) -> None:
    svc = await start_service(TOOL_SPEC)
    stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    request = tool_pb2.ExecuteToolRequest(
        call=common_pb2.ToolCall(id="c1", name="calculator", arguments_json=arguments), session_id="s1"
    )
    response = await stub.ExecuteTool(request, metadata=_admin(svc), timeout=10)
    error = response.result.error
    assert error.code == common_pb2.ERROR_CODE_ARGUMENTS_NOT_JSON, response
    assert error.error_class == common_pb2.ERROR_CLASS_CONTRACT
    assert "must be valid Unicode" in error.violations[0].hint


async def test_append_message_refuses_tool_call_arguments_nested_too_deeply(start_service: Start) -> None:
    svc = await start_service(CONTEXT_SPEC)
    stub = context_pb2_grpc.ContextServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    md = _admin(svc)
    await stub.CreateSession(context_pb2.CreateSessionRequest(session_id="s1", agent_id="fuzz", goal="g"), metadata=md)

    def append(arguments: str) -> Any:
        call = common_pb2.ToolCall(id="c1", name="calculator", arguments_json=arguments)
        message = common_pb2.Message(role=common_pb2.ROLE_ASSISTANT, content="x", tool_calls=[call])
        return stub.AppendMessage(context_pb2.AppendMessageRequest(session_id="s1", message=message), metadata=md)

    field, details = await _invalid(append(DEEP_OBJECT))
    assert field == "message.tool_calls[0].arguments_json" and "deeper than 64" in details
    # Arguments that are not JSON, or hold a lone surrogate escape, are the model's text: kept as sent.
    for kept in ("not json", '{"expression": "\\ud800"}'):
        await append(kept)
