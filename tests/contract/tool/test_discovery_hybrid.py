"""DiscoverTools with `tools.discovery: hybrid` through a real gRPC server (issue 51): a registered tool is
found by a Chinese goal that shares no word with it, and permitted_only still filters."""

from __future__ import annotations

import json
from typing import Any

from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client
from tests.contract.tool.fakes import FakeUpstream


async def test_a_chinese_goal_finds_the_registered_english_tool(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service({"tools": {"discovery": "hybrid"}}))
    spec = common_pb2.ToolSpec(
        name="query_user_info",
        description="Query a user's profile information by user id",
        input_schema_json=json.dumps({"type": "object", "properties": {"user_id": {"type": "string"}}}),
        permission=common_pb2.ToolPermission(group="crm", access=common_pb2.ACCESS_MODE_READ),
        executor="http",
        endpoint_url=upstream.url("/ok"),
        http_method="GET",
    )
    await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=spec), metadata=c.meta(roles=("admin",)), timeout=5)
    found = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="获取客户资料", k=3), metadata=c.meta(), timeout=30
    )
    assert found.tools[0].tool.name == "query_user_info"
    logs = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="查看支付服务的错误日志", k=3), metadata=c.meta(), timeout=30
    )
    assert logs.tools[0].tool.name == "query_logs"
