"""The `start_service` fixture runs a real service in-process with auth and the test Redis."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.v1 import tool_pb2, tool_pb2_grpc
from tool_svc.server import SPEC as TOOL_SPEC


async def test_start_service_serves_with_auth_and_store(start_service: Any) -> None:
    svc = await start_service(TOOL_SPEC, {"server": {"max_concurrent_rpcs": 7}})
    assert svc.settings.server.max_concurrent_rpcs == 7
    assert svc.host.store is not None
    await svc.host.store.ping()
    reply = await health_pb2_grpc.HealthStub(svc.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await stub.ListTools(tool_pb2.ListToolsRequest(), timeout=5)
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # A signed token gets past auth.
    reply = await stub.ListTools(tool_pb2.ListToolsRequest(), metadata=svc.metadata(), timeout=5)
    assert reply.tools
