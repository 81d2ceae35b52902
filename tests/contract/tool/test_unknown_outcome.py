"""A write is never sent twice: unknown outcomes, settlements and heartbeated leases, through a real gRPC
server, with the side effects counted at the fake upstream (issue 18)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.rpc.status import rich_details
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, error_name, output_json
from tests.contract.tool.fakes import FakeUpstream, http_tool

WRITE = {"group": "test", "access": "write"}


def operator(subject: str) -> dict[str, Any]:
    """Claims of an operator's token (a person, not an agent)."""
    return {"roles": ("operator",), "subject": subject, "agent_id": "", "instance": ""}


def unknown_tools(upstream: FakeUpstream, **lease: float) -> dict[str, Any]:
    return {
        "tools": {
            "idempotency_lease_s": lease.get("lease_s", 1.0),
            "idempotency_heartbeat_s": lease.get("heartbeat_s", 0.2),
            "registry": [
                # The client's deadline, not the tool's timeout, ends these calls.
                http_tool("slow_write", upstream, "/slow", permission=WRITE, requires_approval=False, timeout_s=10),
                http_tool("short_write", upstream, "/slow", permission=WRITE, requires_approval=False, timeout_s=0.5),
                http_tool("slow_read", upstream, "/slow", timeout_s=10),
            ],
        }
    }


async def wait_count(upstream: FakeUpstream, path: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while upstream.counts[path] < n:
        assert time.monotonic() < deadline, upstream.counts
        await asyncio.sleep(0.02)


def settlement_of(result: common_pb2.ToolResult) -> str:
    assert error_name(result) == "OUTCOME_UNKNOWN", result
    assert common_pb2.ErrorClass.Name(result.error.error_class) == "ERROR_CLASS_ENGINEERING"
    assert not result.error.retryable
    return str(result.error.metadata["settlement_id"])


async def test_a_call_past_its_deadline_is_never_sent_again(tool_service: Any, upstream: FakeUpstream) -> None:
    """The issue's deterministic case: a 1 s client deadline against a 3 s upstream, then the same key."""
    upstream.slow_s = 3.0
    c = Client(await tool_service(unknown_tools(upstream)))
    try:
        # tool_svc answers just inside the deadline (OUTCOME_UNKNOWN); a slower host may miss it.
        first = await c.execute("slow_write", {"q": "charge"}, key="k-deadline", timeout=1.0)
        settlement_of(first)
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    second = await c.execute("slow_write", {"q": "charge"}, key="k-deadline")
    third = await c.execute("slow_write", {"q": "charge"}, key="k-deadline")
    assert settlement_of(second) == settlement_of(third) and settlement_of(second).startswith("stl_")
    assert second.error.metadata["idempotency_key"] == "k-deadline"
    await asyncio.sleep(upstream.slow_s)  # anything re-sent would have arrived by now
    assert upstream.counts["/slow"] == 1


async def test_a_call_cancelled_after_it_was_sent_is_never_sent_again(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    upstream.slow_s = 3.0
    c = Client(await tool_service(unknown_tools(upstream)))
    request = tool_pb2.ExecuteToolRequest(
        call=common_pb2.ToolCall(id="c1", name="slow_write", arguments_json='{"q": "cancel"}'),
        session_id="sess-1",
        idempotency_key="k-cancel",
    )
    call = c.stub.ExecuteTool(request, metadata=c.meta(), timeout=30)
    await wait_count(upstream, "/slow", 1)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    repeat = await c.execute("slow_write", {"q": "cancel"}, key="k-cancel", call_id="c1")
    settlement_of(repeat)
    await asyncio.sleep(upstream.slow_s)
    assert upstream.counts["/slow"] == 1


async def test_an_upstream_timeout_of_a_write_is_an_unknown_outcome_at_once(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    upstream.slow_s = 1.5
    c = Client(await tool_service(unknown_tools(upstream)))
    first = await c.execute("short_write", {"q": "x"}, key="k-short")
    assert "UPSTREAM_TIMEOUT" in first.error.message and first.error.metadata["arguments_sha256"]
    repeat = await c.execute("short_write", {"q": "x"}, key="k-short")
    assert settlement_of(repeat) == settlement_of(first)
    assert upstream.counts["/slow"] == 1
    # A read is retry-safe: its timeout is an ordinary engineering error and a repeat runs again.
    read = await c.execute("slow_read", {"q": "r"}, key="k-read")
    assert read.WhichOneof("outcome") == "output"


async def test_a_repeat_while_the_call_is_in_flight_is_told_to_retry_not_left_to_time_out(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    upstream.slow_s = 3.0
    c = Client(await tool_service(unknown_tools(upstream)))
    first = asyncio.create_task(c.execute("slow_write", {"q": "y"}, key="k-busy"))
    await wait_count(upstream, "/slow", 1)
    # Past the 1 s lease: only the owner's heartbeat keeps the call alive.
    await asyncio.sleep(1.3)
    with pytest.raises(grpc.aio.AioRpcError) as busy:
        await c.execute("slow_write", {"q": "y"}, key="k-busy", timeout=1.0)
    assert busy.value.code() == grpc.StatusCode.UNAVAILABLE, busy.value.details()
    rich = rich_details(busy.value)
    assert rich.retry_info is not None and rich.retry_info.retry_delay.ToMilliseconds() > 0
    assert rich.detail is not None and rich.detail.metadata["reason"] == "in_progress"
    assert output_json(await first) == {"slow": True}
    replay = await c.execute("slow_write", {"q": "y"}, key="k-busy")
    assert replay.stats.replayed and upstream.counts["/slow"] == 1


async def test_a_dead_owner_that_never_sent_is_taken_over(tool_service: Any, upstream: FakeUpstream) -> None:
    svc = await tool_service(unknown_tools(upstream))
    store = svc.host.store
    sha = await _call_sha(svc, "slow_write", {"q": "z"})
    # A replica claimed the key and died before sending (no heartbeat key).
    record = {"s": "run", "h": sha, "t": "t_dead", "g": 0}
    await store.redis.set(store.keys.idempotency("k-dead-run"), json.dumps(record))
    upstream.slow_s = 0.05
    result = await Client(svc).execute("slow_write", {"q": "z"}, key="k-dead-run")
    assert output_json(result) == {"slow": True} and upstream.counts["/slow"] == 1


async def test_a_dead_owner_that_may_have_sent_is_an_unknown_outcome(tool_service: Any, upstream: FakeUpstream) -> None:
    svc = await tool_service(unknown_tools(upstream))
    store = svc.host.store
    sha = await _call_sha(svc, "slow_write", {"q": "s"})
    await store.redis.set(store.keys.idempotency("k-dead-sent"), json.dumps({"s": "sent", "h": sha, "t": "t_x"}))
    result = await Client(svc).execute("slow_write", {"q": "s"}, key="k-dead-sent")
    settlement_of(result)
    assert upstream.counts["/slow"] == 0


async def _call_sha(svc: Any, tool: str, arguments: Any) -> str:
    from tool_svc.model import call_sha256

    return call_sha256(tool, arguments)


async def settle(c: Client, result: common_pb2.ToolResult, outcome: Any, **claims: Any) -> Any:
    return await c.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=result.error.metadata["settlement_id"],
            arguments_sha256=result.error.metadata["arguments_sha256"],
            settlement=outcome,
            reason="checked the upstream",
        ),
        metadata=c.meta(**claims),
        timeout=15,
    )


async def test_settled_ran_is_recorded_and_never_re_sent(tool_service: Any, upstream: FakeUpstream) -> None:
    upstream.slow_s = 1.0
    c = Client(await tool_service(unknown_tools(upstream)))
    unknown = await c.execute("short_write", {"q": "ran"}, key="k-ran")
    sid = settlement_of(unknown)
    approval = await c.stub.GetApproval(tool_pb2.GetApprovalRequest(approval_id=sid), metadata=c.meta(), timeout=5)
    assert approval.approval.request.kind == common_pb2.APPROVAL_KIND_SETTLEMENT
    assert approval.approval.state == common_pb2.APPROVAL_STATE_PENDING
    reply = await settle(c, unknown, common_pb2.SETTLEMENT_OUTCOME_RAN, **operator("alice"))
    assert reply.approval.settlement == common_pb2.SETTLEMENT_OUTCOME_RAN
    ran = output_json(reply.result)
    assert ran["settled"] == "ran" and ran["output"] is None and ran["settled_by"] == "alice"
    repeat = await c.execute("short_write", {"q": "ran"}, key="k-ran")
    assert repeat.stats.replayed and output_json(repeat) == ran
    assert upstream.counts["/slow"] == 1
    with pytest.raises(grpc.aio.AioRpcError) as twice:
        await settle(c, unknown, common_pb2.SETTLEMENT_OUTCOME_NOT_RAN, **operator("alice"))
    assert twice.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert upstream.counts["/slow"] == 1


async def test_settled_not_ran_re_sends_once_with_the_same_key(tool_service: Any, upstream: FakeUpstream) -> None:
    upstream.slow_s = 1.0
    c = Client(await tool_service(unknown_tools(upstream)))
    unknown = await c.execute("short_write", {"q": "again"}, key="k-not-ran")
    await wait_count(upstream, "/slow", 1)
    upstream.slow_s = 0.01
    reply = await settle(c, unknown, common_pb2.SETTLEMENT_OUTCOME_NOT_RAN, **operator("bob"))
    assert output_json(reply.result) == {"slow": True}
    assert upstream.counts["/slow"] == 2
    repeat = await c.execute("short_write", {"q": "again"}, key="k-not-ran")
    assert repeat.stats.replayed and output_json(repeat) == {"slow": True}
    assert upstream.counts["/slow"] == 2


async def test_a_re_send_that_ends_unknown_again_opens_the_next_settlement(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    upstream.slow_s = 1.0
    c = Client(await tool_service(unknown_tools(upstream)))
    unknown = await c.execute("short_write", {"q": "twice"}, key="k-gen")
    reply = await settle(c, unknown, common_pb2.SETTLEMENT_OUTCOME_NOT_RAN, **operator("dave"))
    again = reply.result
    assert settlement_of(again) != settlement_of(unknown)
    repeat = await c.execute("short_write", {"q": "twice"}, key="k-gen")
    assert settlement_of(repeat) == settlement_of(again)
    assert upstream.counts["/slow"] == 2


async def test_a_settlement_needs_an_operator_and_a_finding(tool_service: Any, upstream: FakeUpstream) -> None:
    upstream.slow_s = 1.0
    c = Client(await tool_service(unknown_tools(upstream)))
    unknown = await c.execute("short_write", {"q": "who"}, key="k-who")
    with pytest.raises(grpc.aio.AioRpcError) as agent:
        await settle(c, unknown, common_pb2.SETTLEMENT_OUTCOME_RAN)  # the agent's own token
    assert agent.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as no_finding:
        await settle(c, unknown, common_pb2.SETTLEMENT_OUTCOME_UNSPECIFIED, **operator("dave"))
    assert no_finding.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "RAN or NOT_RAN" in (no_finding.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as bogus:
        await settle(c, unknown, 42, **operator("dave"))
    assert bogus.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert upstream.counts["/slow"] == 1


async def test_an_approval_is_not_settled(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service())
    pending = await c.execute("restart_service", {"service": "payment-svc"}, key="k-approval")
    assert pending.WhichOneof("outcome") == "pending_approval"
    assert pending.pending_approval.kind == common_pb2.APPROVAL_KIND_CALL
    with pytest.raises(grpc.aio.AioRpcError) as wrong:
        await c.stub.ResolveApproval(
            tool_pb2.ResolveApprovalRequest(
                approval_id=pending.pending_approval.approval_id,
                arguments_sha256=pending.pending_approval.arguments_sha256,
                settlement=common_pb2.SETTLEMENT_OUTCOME_RAN,
            ),
            metadata=c.meta(**operator("carol")),
            timeout=5,
        )
    assert wrong.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_write_that_never_connected_may_run_again(
    tool_service: Any, upstream: FakeUpstream, refused_port: int
) -> None:
    """A refused connection is known not to have reached the upstream: not an unknown outcome."""
    closed = f"http://127.0.0.1:{refused_port}"
    entry = http_tool("dead_write", upstream, "/ok", permission=WRITE, requires_approval=False)
    entry["endpoint_url"] = f"{closed}/write"
    allow = [f"http://127.0.0.1:{upstream.port}/", f"{closed}/"]
    c = Client(await tool_service({"tools": {"http_allowlist": allow, "registry": [entry]}}))
    first = await c.execute("dead_write", {"q": "1"}, key="k-refused")
    assert error_name(first) == "UPSTREAM_UNAVAILABLE" and first.error.metadata["sent"] == "no"
    second = await c.execute("dead_write", {"q": "1"}, key="k-refused")
    assert error_name(second) == "UPSTREAM_UNAVAILABLE" and not second.stats.replayed
