"""Security through a real gRPC server: identity from the verified token only, roles, approvals."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import grpc
import pytest

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.tokens import mint_token
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, class_name, error_name, output_json
from tests.contract.tool.fakes import FakeUpstream
from tool_svc.model import arguments_sha256

# --- identity -----------------------------------------------------------------------------------------


async def test_missing_or_forged_tokens_are_refused(tool_service: Any) -> None:
    svc = await tool_service()
    c = Client(svc)
    forged = mint_token(b"not-the-service-key-" + b"x" * 20, subject="agent-a", roles=["admin"], ttl_s=60)
    genuine = c.meta()[0][1]
    payload, _signature = genuine.split(".")
    tampered = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + _signature
    for metadata in ((), ((IDENTITY_HEADER, forged),), ((IDENTITY_HEADER, tampered),), ((IDENTITY_HEADER, "garbage"),)):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await c.execute("calculator", {"expression": "1"}, metadata=metadata)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as listing:
            await c.stub.ListTools(tool_pb2.ListToolsRequest(), metadata=metadata, timeout=5)
        assert listing.value.code() == grpc.StatusCode.UNAUTHENTICATED
    expired = svc.token(("agent",), agent_id="agent-a", permissions=["*:*:*"], ttl_s=1, now=time.time() - 3600)
    with pytest.raises(grpc.aio.AioRpcError) as old:
        await c.execute("calculator", {"expression": "1"}, metadata=((IDENTITY_HEADER, expired),))
    assert old.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_permissions_come_from_the_token_only(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    weak: dict[str, Any] = {"agent_id": "reader", "permissions": ["dev:test:read"]}
    denied = await c.execute("charge", {"order_id": "ORD-2025-0001", "amount": 5}, **weak)
    assert error_name(denied) == "PERMISSION_DENIED" and class_name(denied) == "ENGINEERING"
    assert denied.error.missing_permission == "dev:payments:write"
    # Claiming to be someone else, in metadata or in the arguments, changes nothing.
    spoof = (*c.meta(**weak), ("x-agent-id", "admin-agent"), ("x-agentmesh-permissions", "*:*:*"))
    again = await c.execute(
        "charge", raw='{"order_id": "ORD-2025-0001", "amount": 5, "agent_id": "admin"}', metadata=spoof
    )
    assert error_name(again) in ("PERMISSION_DENIED", "SCHEMA_INVALID")
    assert upstream.counts["/count"] == 0
    # Only the first identity header counts: a forged one first is refused, a second one is ignored.
    strong = c.meta(agent_id="writer", permissions=["*:payments:write"])
    with pytest.raises(grpc.aio.AioRpcError):
        await c.execute("calculator", {"expression": "1"}, metadata=((IDENTITY_HEADER, "forged.token"), *strong))
    weak_first = (*c.meta(**weak), *strong)
    still_denied = await c.execute("charge", {"order_id": "ORD-2025-0001", "amount": 5}, metadata=weak_first)
    assert error_name(still_denied) == "PERMISSION_DENIED"
    # Write implies read; a read grant does not imply write.
    reader = await c.execute("get_ok", {}, agent_id="w", permissions=["dev:test:write"])
    assert reader.WhichOneof("outcome") == "output"
    # An environment grant is checked too: a prod grant does not open dev tools.
    other_env = await c.execute("get_ok", {}, agent_id="p", permissions=["prod:*:*"])
    assert error_name(other_env) == "PERMISSION_DENIED" and other_env.error.missing_permission == "dev:test:read"


async def test_discovery_can_show_only_permitted_tools(tool_service: Any) -> None:
    c = Client(await tool_service())
    everything = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="restart the payment service", k=50),
        metadata=c.meta(permissions=[]),
        timeout=5,
    )
    assert "restart_service" in [s.tool.name for s in everything.tools]
    permitted = await c.stub.DiscoverTools(
        tool_pb2.DiscoverToolsRequest(goal="restart the payment service", k=50, permitted_only=True),
        metadata=c.meta(permissions=["*:ops.read:read", "*:builtin.*:read"]),
        timeout=5,
    )
    names = [s.tool.name for s in permitted.tools]
    assert "restart_service" not in names and "query_logs" in names


# --- roles --------------------------------------------------------------------------------------------


def _register_request(upstream: FakeUpstream, name: str = "ping_upstream") -> tool_pb2.RegisterToolRequest:
    return tool_pb2.RegisterToolRequest(
        tool=common_pb2.ToolSpec(
            name=name,
            description="Use when checking the upstream",
            input_schema_json=json.dumps({"type": "object"}),
            permission=common_pb2.ToolPermission(group="test", access=common_pb2.ACCESS_MODE_READ),
            executor="http",
            endpoint_url=upstream.url("/ok"),
            http_method="GET",
        )
    )


async def test_register_tool_needs_admin(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    for roles in (("agent",), ("operator",)):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await c.stub.RegisterTool(_register_request(upstream), metadata=c.meta(roles=roles), timeout=5)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    reply = await c.stub.RegisterTool(_register_request(upstream), metadata=c.meta(roles=("admin",)), timeout=5)
    assert reply.tool.name == "ping_upstream" and reply.tool.executor == "http" and reply.tool.http_method == "GET"
    assert not reply.HasField("pending_approval")
    assert output_json(await c.execute("ping_upstream", {"a": 1}))["count"] == 1


async def test_resolve_approval_needs_operator(tool_service: Any) -> None:
    c = Client(await tool_service())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.stub.ResolveApproval(
            tool_pb2.ResolveApprovalRequest(approval_id="apr_x", approve=True, arguments_sha256="x"),
            metadata=c.meta(roles=("agent",)),
            timeout=5,
        )
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED


# --- approvals ----------------------------------------------------------------------------------------


async def _pending(c: Client, service: str = "payment-svc", **kw: Any) -> common_pb2.PendingApproval:
    result = await c.execute("restart_service", {"service": service}, **kw)
    assert result.WhichOneof("outcome") == "pending_approval", result
    return result.pending_approval


async def _resolve(c: Client, approval_id: str, sha: str, *, approve: bool = True, **claims: Any) -> Any:
    claims.setdefault("agent_id", "")
    claims.setdefault("subject", "alice")
    return await c.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(approval_id=approval_id, approve=approve, reason="ok", arguments_sha256=sha),
        metadata=c.meta(roles=("operator",), **claims),
        timeout=10,
    )


async def test_write_waits_for_approval_then_runs_once(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    pending = await _pending(c, call_id="call-7")
    assert pending.approval_id.startswith("apr_")
    assert pending.plan.name == "restart_service" and json.loads(pending.plan.arguments_json) == {
        "service": "payment-svc"
    }
    assert pending.plan.id == "call-7"
    assert "30 s of failed requests" in pending.impact
    assert pending.requested_by == "agent-a"
    assert pending.arguments_sha256 == arguments_sha256({"service": "payment-svc"})
    assert pending.expire_time.seconds > time.time()
    assert upstream.counts["/count"] == 0  # nothing ran

    got = await c.stub.GetApproval(
        tool_pb2.GetApprovalRequest(approval_id=pending.approval_id), metadata=c.meta(), timeout=5
    )
    assert got.approval.state == common_pb2.APPROVAL_STATE_PENDING

    reply = await _resolve(c, pending.approval_id, pending.arguments_sha256)
    assert reply.approval.state == common_pb2.APPROVAL_STATE_APPROVED and reply.approval.resolved_by == "alice"
    assert output_json(reply.result)["n"] == 1 and reply.result.tool_call_id == "call-7"
    assert upstream.counts["/count"] == 1

    # Approved once: a replay of the decision is refused and nothing runs again.
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await _resolve(c, pending.approval_id, pending.arguments_sha256)
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert upstream.counts["/count"] == 1


async def test_the_requester_cannot_approve_its_own_call(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    pending = await _pending(c)
    claim_sets: list[dict[str, Any]] = [{"subject": "agent-a"}, {"subject": "someone", "agent_id": "agent-a"}]
    for claims in claim_sets:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _resolve(c, pending.approval_id, pending.arguments_sha256, **claims)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert from_rpc_error(caught.value).code == ErrorCode.PERMISSION_DENIED
    assert upstream.counts["/count"] == 0


async def test_an_approval_cannot_be_replayed_for_other_arguments(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    pending = await _pending(c, "payment-svc")
    other = arguments_sha256({"service": "ledger-svc"})
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _resolve(c, pending.approval_id, other)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as empty:
        await _resolve(c, pending.approval_id, "")
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # A call with other arguments is a new call: it needs its own approval.
    second = await _pending(c, "ledger-svc", key="k-ledger")
    assert second.approval_id != pending.approval_id
    assert upstream.counts["/count"] == 0


async def test_denial(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    pending = await _pending(c, key="task-1:call-1")
    reply = await _resolve(c, pending.approval_id, pending.arguments_sha256, approve=False)
    assert reply.approval.state == common_pb2.APPROVAL_STATE_DENIED
    assert error_name(reply.result) == "APPROVAL_DENIED" and class_name(reply.result) == "ENGINEERING"
    # The same call again (a resumed task) gets the denial, not a new approval.
    again = await c.execute("restart_service", {"service": "payment-svc"}, key="task-1:call-1")
    assert error_name(again) == "APPROVAL_DENIED" and again.stats.replayed
    assert upstream.counts["/count"] == 0


async def test_approvals_expire(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service({"tools": {"approval_ttl_s": 0.5}}))
    pending = await _pending(c, key="task-2:call-1")
    # A repeat while pending returns the same approval rather than asking twice.
    repeat = await c.execute("restart_service", {"service": "payment-svc"}, key="task-2:call-1")
    assert repeat.pending_approval.approval_id == pending.approval_id
    deadline = time.monotonic() + 10
    while True:
        got = await c.stub.GetApproval(
            tool_pb2.GetApprovalRequest(approval_id=pending.approval_id), metadata=c.meta(), timeout=5
        )
        if got.approval.state == common_pb2.APPROVAL_STATE_EXPIRED:
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    reply = await _resolve(c, pending.approval_id, pending.arguments_sha256)
    assert reply.approval.state == common_pb2.APPROVAL_STATE_EXPIRED
    assert error_name(reply.result) == "APPROVAL_EXPIRED" and class_name(reply.result) == "ENGINEERING"
    assert upstream.counts["/count"] == 0
    # Expiry is not final: the same call asks again.
    fresh = await c.execute("restart_service", {"service": "payment-svc"}, key="task-2:call-1")
    assert (
        fresh.WhichOneof("outcome") == "pending_approval" and fresh.pending_approval.approval_id != pending.approval_id
    )


async def test_only_the_requester_and_operators_read_an_approval(tool_service: Any) -> None:
    c = Client(await tool_service())
    pending = await _pending(c)
    request = tool_pb2.GetApprovalRequest(approval_id=pending.approval_id)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.stub.GetApproval(request, metadata=c.meta(agent_id="agent-b"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    for metadata in (c.meta(), c.meta(roles=("operator",), agent_id="", subject="alice")):
        reply = await c.stub.GetApproval(request, metadata=metadata, timeout=5)
        assert reply.approval.request.approval_id == pending.approval_id


async def test_unknown_approval(tool_service: Any) -> None:
    c = Client(await tool_service())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await c.stub.GetApproval(tool_pb2.GetApprovalRequest(approval_id="apr_missing"), metadata=c.meta(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as resolve:
        await _resolve(c, "apr_missing", "x" * 64)
    assert resolve.value.code() == grpc.StatusCode.NOT_FOUND
