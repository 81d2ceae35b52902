"""Generate bills only the token's own agent unless the caller is admin (docs/design.md §9).

Through the real gRPC server: a refused Generate or GenerateStream records no usage at all; the
dispatcher's task tokens (subject and agent_id = the agent) bill their agent as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from provider_svc.server import SPEC
from tests.conftest import RunningService

Start = Callable[..., Awaitable[RunningService]]

PROVIDERS = {
    "providers": {
        "backends": [
            {"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": [{"name": "default"}]}
        ],
        "default_model": "scripted/default",
    }
}


def _request(agent_id: str = "") -> provider_pb2.GenerateRequest:
    return provider_pb2.GenerateRequest(
        messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content="hello")], agent_id=agent_id
    )


def _stub(svc: RunningService) -> provider_pb2_grpc.ProviderServiceStub:
    return provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]


async def _usage(svc: RunningService) -> set[tuple[str, int]]:
    reply = await _stub(svc).GetUsage(provider_pb2.GetUsageRequest(), metadata=svc.metadata(roles=("admin",)))
    return {(row.agent_id, row.calls) for row in reply.rows}


async def _stream(svc: RunningService, request: provider_pb2.GenerateRequest, metadata: Any) -> None:
    call = _stub(svc).GenerateStream(provider_pb2.GenerateStreamRequest(request=request), metadata=metadata)
    async for _ in call:
        pass


async def _refused(svc: RunningService, agent_id: str, metadata: Any) -> None:
    """Generate and GenerateStream naming `agent_id` are PERMISSION_DENIED, saying why."""
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await _stub(svc).Generate(_request(agent_id), metadata=metadata)
    assert unary.value.code() == grpc.StatusCode.PERMISSION_DENIED, unary.value.details()
    assert agent_id in (unary.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as stream:
        await _stream(svc, _request(agent_id), metadata)
    assert stream.value.code() == grpc.StatusCode.PERMISSION_DENIED, stream.value.details()


async def test_an_operator_cannot_bill_an_agent(start_service: Start) -> None:
    svc = await start_service(SPEC, PROVIDERS)
    operator = svc.metadata(roles=("operator",), subject="ops-jane")
    await _refused(svc, "billing-victim", operator)
    assert await _usage(svc) == set()
    # Naming no agent is allowed: the call is recorded under the operator's own subject, as before.
    await _stub(svc).Generate(_request(), metadata=operator)
    await _stream(svc, _request(), operator)
    assert await _usage(svc) == {("ops-jane", 2)}


async def test_an_agent_cannot_bill_another_agent(start_service: Start) -> None:
    svc = await start_service(SPEC, PROVIDERS)
    agent = svc.metadata(subject="agent-a", agent_id="agent-a")
    await _refused(svc, "agent-b", agent)
    assert await _usage(svc) == set()
    # Its own id, or none, bills itself.
    await _stub(svc).Generate(_request("agent-a"), metadata=agent)
    await _stub(svc).Generate(_request(), metadata=agent)
    assert await _usage(svc) == {("agent-a", 2)}


async def test_an_admin_may_bill_any_agent(start_service: Start) -> None:
    svc = await start_service(SPEC, PROVIDERS)
    admin = svc.metadata(roles=("admin",), subject="root-ann")
    await _stub(svc).Generate(_request("agent-b"), metadata=admin)
    await _stream(svc, _request("agent-c"), admin)
    await _stub(svc).Generate(_request(), metadata=admin)
    assert await _usage(svc) == {("agent-b", 1), ("agent-c", 1), ("root-ann", 1)}


async def test_the_dispatchers_task_tokens_still_bill_their_agent(start_service: Start) -> None:
    svc = await start_service(SPEC, PROVIDERS)
    # As `Dispatcher.mint_task_token` mints it; the dispatcher's adapter sends agent_id = its agent.
    task = svc.metadata(
        subject="sre-bot",
        agent_id="sre-bot",
        instance="sre-bot/t-1",
        task_id="t-1",
        permissions=("dev:ops:read",),
    )
    reply = await _stub(svc).Generate(_request("sre-bot"), metadata=task)
    assert reply.usage.output_tokens > 0
    await _stream(svc, _request("sre-bot"), task)
    assert await _usage(svc) == {("sre-bot", 2)}
