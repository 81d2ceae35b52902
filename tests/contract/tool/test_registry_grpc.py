"""ListTools, DiscoverTools and RegisterTool through a real gRPC server."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client
from tests.contract.tool.fakes import FakeUpstream


async def test_list_tools_is_sorted_and_filtered(tool_service: Any) -> None:
    c = Client(await tool_service())
    reply = await c.stub.ListTools(tool_pb2.ListToolsRequest(), metadata=c.meta(), timeout=5)
    names = [t.name for t in reply.tools]
    assert names == sorted(names) and {"calculator", "query_logs", "run_python", "restart_service"} <= set(names)
    restart = next(t for t in reply.tools if t.name == "restart_service")
    assert restart.requires_approval and restart.permission.access == common_pb2.ACCESS_MODE_WRITE
    assert restart.impact and restart.executor == "http" and restart.timeout.ToNanoseconds() > 0
    assert json.loads(restart.input_schema_json)["required"] == ["service"]
    run_shell = next(t for t in reply.tools if t.name == "run_shell")
    assert json.loads(run_shell.input_schema_json)["properties"]["command"]["x-agentmesh-kind"] == "shell"
    ops = await c.stub.ListTools(tool_pb2.ListToolsRequest(group="ops.read"), metadata=c.meta(), timeout=5)
    assert [t.name for t in ops.tools] == ["query_logs"]


async def test_discover_tools(tool_service: Any) -> None:
    c = Client(await tool_service())
    reply = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="why is payment-svc failing? check the error logs", k=3),
        metadata=c.meta(),
        timeout=5,
    )
    assert len(reply.tools) == 3 and reply.tools[0].tool.name == "query_logs"
    assert reply.tools[0].score >= reply.tools[1].score >= reply.tools[2].score
    chinese = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="查看支付服务的错误日志"), metadata=c.meta(), timeout=5
    )
    assert len(chinese.tools) == 5 and chinese.tools[0].tool.name == "query_logs"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.stub.DiscoverTools(tool_pb2.DiscoverToolsRequest(goal="x", k=51), metadata=c.meta(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def _spec(upstream: FakeUpstream, **fields: Any) -> common_pb2.ToolSpec:
    spec = common_pb2.ToolSpec(
        name="get_inventory",
        description="Use when checking the stock of a product",
        examples=["how many units of SKU-1 are left"],
        input_schema_json=json.dumps(
            {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
        ),
        permission=common_pb2.ToolPermission(group="shop", access=common_pb2.ACCESS_MODE_READ),
        timeout=duration_pb2.Duration(seconds=2),
        executor="http",
        endpoint_url=upstream.url("/ok"),
        http_method="GET",
        fallback_tool="query_logs",
    )
    for key, value in fields.items():
        setattr(spec, key, value)
    return spec


async def test_registered_tools_are_discovered_and_executed(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    admin = c.meta(roles=("admin",))
    await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=_spec(upstream)), metadata=admin, timeout=5)
    found = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="how much stock is left for this product", k=1), metadata=c.meta(), timeout=5
    )
    assert found.tools[0].tool.name == "get_inventory"
    missing = await c.execute("get_inventory", {})
    assert missing.error.violations[0].path == "$.sku"
    # Registering twice needs replace.
    with pytest.raises(grpc.aio.AioRpcError) as twice:
        await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=_spec(upstream)), metadata=admin, timeout=5)
    assert twice.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    replaced = await c.stub.RegisterTool(
        tool_pb2.RegisterToolRequest(tool=_spec(upstream, description="Use when counting stock"), replace=True),
        metadata=admin,
        timeout=5,
    )
    assert replaced.tool.description == "Use when counting stock"


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"input_schema_json": "{not json"}, "tool.input_schema_json", "not JSON"),
        (
            {"input_schema_json": json.dumps({"type": "object", "properties": {"a": {"type": 5}}})},
            "tool.input_schema_json",
            "Draft 2020-12",
        ),
        ({"input_schema_json": json.dumps({"type": "string"})}, "tool.input_schema_json", "object"),
        ({"output_schema_json": json.dumps({"type": "nope"})}, "tool.output_schema_json", "Draft 2020-12"),
        ({"endpoint_url": "https://evil.example.com/"}, "tool.endpoint_url", "allowlist"),
        ({"executor": "builtin"}, "tool.executor", "only http"),
        ({"name": "Get Inventory"}, "tool.name", "must match"),
        ({"description": ""}, "tool.description", "required"),
        ({"fallback_tool": "no_such_tool"}, "tool.fallback_tool", "not a registered tool"),
    ],
)
async def test_bad_registrations_are_refused_with_the_reason(
    tool_service: Any, upstream: FakeUpstream, fields: dict[str, Any], field: str, reason: str
) -> None:
    c = Client(await tool_service())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.stub.RegisterTool(
            tool_pb2.RegisterToolRequest(tool=_spec(upstream, **fields)), metadata=c.meta(roles=("admin",)), timeout=5
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = from_rpc_error(caught.value)
    assert err.code == ErrorCode.INVALID_REQUEST and err.violations[0].path == field
    assert reason in err.message
