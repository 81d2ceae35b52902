"""Separation of duties where the decision is applied (issue 39, high): a task's creator and its agent
may not decide the task's approvals or settlements by calling ToolService/ResolveApproval directly,
around the dispatcher's check. Effects are counted at the fake upstream."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, output_json
from tests.contract.tool.fakes import FakeUpstream, http_tool
from tests.contract.tool.test_unknown_outcome import settlement_of

WRITE = {"group": "test", "access": "write"}

TASK: dict[str, Any] = {
    "agent_id": "ops-agent",
    "subject": "ops-agent",
    "instance": "ops-agent/t-1",
    "task_id": "t-1",
    "creator": "alice",
}
"""The claims of the task's token as the dispatcher mints it: started by alice."""

# Every identity that must be refused: the creator as operator, as admin, as both; and the task's agent
# holding an operator role (another instance of it, e.g. a second task token or a leaked grant).
REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("creator-operator", {"roles": ("operator",), "subject": "alice", "agent_id": "", "instance": ""}),
    ("creator-admin", {"roles": ("admin",), "subject": "alice", "agent_id": "", "instance": ""}),
    ("creator-both", {"roles": ("admin", "operator"), "subject": "alice", "agent_id": "", "instance": ""}),
    ("task-agent", {"roles": ("operator",), "subject": "ops-agent", "agent_id": "ops-agent", "instance": "x"}),
    ("task-agent-other-subject", {"roles": ("operator",), "subject": "svc", "agent_id": "ops-agent", "instance": ""}),
]

OTHER = {"roles": ("operator",), "subject": "bob", "agent_id": "", "instance": ""}


async def _resolve(c: Client, approval_id: str, sha: str, claims: dict[str, Any], **fields: Any) -> Any:
    claims = dict(claims)
    roles = claims.pop("roles")
    return await c.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(approval_id=approval_id, arguments_sha256=sha, reason="r", **fields),
        metadata=c.meta(roles=roles, **claims),
        timeout=10,
    )


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "deny"])
async def test_the_creator_and_the_agent_cannot_decide_the_tasks_approval(
    tool_service: Any, upstream: FakeUpstream, approve: bool
) -> None:
    c = Client(await tool_service())
    result = await c.execute("restart_service", {"service": "api"}, **TASK)
    assert result.WhichOneof("outcome") == "pending_approval", result
    pending = result.pending_approval
    for name, claims in REFUSED:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _resolve(c, pending.approval_id, pending.arguments_sha256, claims, approve=approve)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
        details = caught.value.details() or ""
        assert "may not decide" in details or "cannot approve or deny" in details, name
    assert upstream.counts["/count"] == 0
    state = await c.stub.GetApproval(
        tool_pb2.GetApprovalRequest(approval_id=pending.approval_id), metadata=c.meta(**TASK), timeout=5
    )
    assert state.approval.state == common_pb2.APPROVAL_STATE_PENDING  # still open for another operator
    reply = await _resolve(c, pending.approval_id, pending.arguments_sha256, OTHER, approve=approve)
    if approve:
        assert output_json(reply.result)["n"] == 1
    assert upstream.counts["/count"] == (1 if approve else 0)


@pytest.mark.parametrize("outcome", ["RAN", "NOT_RAN"])
async def test_the_creator_and_the_agent_cannot_settle_the_tasks_call(
    tool_service: Any, upstream: FakeUpstream, outcome: str
) -> None:
    upstream.slow_s = 1.0
    c = Client(
        await tool_service(
            {
                "tools": {
                    "registry": [
                        http_tool(
                            "short_write", upstream, "/slow", permission=WRITE, requires_approval=False, timeout_s=0.3
                        )
                    ]
                }
            }
        )
    )
    unknown = await c.execute("short_write", {"q": "sod"}, key="k-sod", **TASK)
    sid = settlement_of(unknown)
    sha = unknown.error.metadata["arguments_sha256"]
    settlement = common_pb2.SettlementOutcome.Value(f"SETTLEMENT_OUTCOME_{outcome}")
    upstream.slow_s = 0.01
    sent = upstream.counts["/slow"]
    for name, claims in REFUSED:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _resolve(c, sid, sha, claims, settlement=settlement)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
    assert upstream.counts["/slow"] == sent  # nothing re-sent by a refused NOT_RAN
    await _resolve(c, sid, sha, OTHER, settlement=settlement)
    assert upstream.counts["/slow"] == sent + (1 if outcome == "NOT_RAN" else 0)


async def test_a_call_outside_any_task_keeps_the_requester_rule_only(tool_service: Any, upstream: FakeUpstream) -> None:
    """No task in the token: no creator to refuse; the requester itself is still refused."""
    c = Client(await tool_service())
    result = await c.execute("restart_service", {"service": "api"}, agent_id="ops-agent", subject="ops-agent")
    pending = result.pending_approval
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _resolve(c, pending.approval_id, pending.arguments_sha256, REFUSED[3][1], approve=True)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    await _resolve(c, pending.approval_id, pending.arguments_sha256, REFUSED[0][1], approve=True)  # alice
    assert upstream.counts["/count"] == 1


async def test_separation_of_duties_off_lets_the_creator_decide(tool_service: Any, upstream: FakeUpstream) -> None:
    c = Client(await tool_service({"auth": {"separation_of_duties": False}}))
    result = await c.execute("restart_service", {"service": "api"}, **TASK)
    pending = result.pending_approval
    await _resolve(c, pending.approval_id, pending.arguments_sha256, REFUSED[0][1], approve=True)
    assert upstream.counts["/count"] == 1
