"""tool_svc's audit entries, through a real gRPC server (docs/design.md §9).

RegisterTool -> `tool.register`; a call refused for its role -> `auth.refused` (written by the edge);
ResolveApproval -> `approval.resolve` (calls and registrations) or `settlement.resolve`. Each names
the verified subject, the target, the outcome and the time.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import duration_pb2

from agentmesh.audit import AuditEntry, AuditLog
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, error_name, output_json
from tests.contract.tool.fakes import FakeUpstream, http_tool

REGISTER_TOOL = "/agentmesh.v1.ToolService/RegisterTool"
WRITE = {"group": "test", "access": "write"}


def operator(subject: str) -> dict[str, Any]:
    return {"roles": ("operator",), "subject": subject, "agent_id": "", "instance": ""}


def admin(subject: str) -> dict[str, Any]:
    return {"roles": ("admin",), "subject": subject, "agent_id": "", "instance": ""}


async def entries(svc: Any, action: str = "", *, at_least: int = 1, wait_s: float = 5.0) -> list[AuditEntry]:
    """The audit entries of `action` (a prefix), waiting up to `wait_s` for `at_least` of them."""
    log = AuditLog(svc.host.store, svc.settings.audit)
    deadline = time.monotonic() + wait_s
    while True:
        found = await log.read(action=action)
        if len(found) >= at_least or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.02)


def _spec(upstream: FakeUpstream, name: str, method: str = "GET") -> common_pb2.ToolSpec:
    return common_pb2.ToolSpec(
        name=name,
        description=f"Use when testing {name}",
        input_schema_json=json.dumps({"type": "object"}),
        permission=common_pb2.ToolPermission(group="shop", access=common_pb2.ACCESS_MODE_READ),
        timeout=duration_pb2.Duration(seconds=2),
        executor="http",
        endpoint_url=upstream.url("/ok"),
        http_method=method,
    )


async def _resolve(c: Client, pending: common_pb2.PendingApproval, approve: bool, **claims: Any) -> Any:
    return await c.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=pending.approval_id,
            approve=approve,
            reason="checked",
            arguments_sha256=pending.arguments_sha256,
        ),
        metadata=c.meta(**claims),
        timeout=10,
    )


async def test_register_tool_by_an_admin_is_audited(tool_service: Any, upstream: FakeUpstream) -> None:
    svc = await tool_service()
    c = Client(svc)
    before_ms = int(time.time() * 1000)
    await c.stub.RegisterTool(
        tool_pb2.RegisterToolRequest(tool=_spec(upstream, "get_inventory")), metadata=c.meta(**admin("root-ann"))
    )
    [entry] = await entries(svc, "tool.register")
    assert (entry.subject, entry.action, entry.target, entry.outcome) == (
        "root-ann",
        "tool.register",
        "get_inventory",
        "ok",
    )
    assert before_ms <= entry.time_ms <= int(time.time() * 1000)


async def test_a_registration_held_for_review_and_its_approval_are_audited(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    svc = await tool_service()
    c = Client(svc)
    # A POST endpoint declared read: held for a second admin (ToolRegistry.review).
    reply = await c.stub.RegisterTool(
        tool_pb2.RegisterToolRequest(tool=_spec(upstream, "post_stock", method="POST")),
        metadata=c.meta(**admin("root-ann")),
    )
    pending = reply.pending_approval
    assert pending.approval_id
    [held] = await entries(svc, "tool.register")
    assert (held.subject, held.target, held.outcome) == ("root-ann", "post_stock", "pending_review")
    assert pending.approval_id in held.detail
    approved = await _resolve(c, pending, True, **admin("root-bob"))
    assert output_json(approved.result) == {"registered": "post_stock", "replaced": False}
    [decision] = await entries(svc, "approval.resolve")
    assert (decision.subject, decision.target, decision.outcome) == ("root-bob", pending.approval_id, "ok")
    assert decision.detail.startswith("approved")
    registered = await entries(svc, "tool.register", at_least=2)
    assert [(e.subject, e.target, e.outcome) for e in registered] == [
        ("root-ann", "post_stock", "pending_review"),
        ("root-bob", "post_stock", "ok"),
    ]


async def test_register_tool_with_an_agent_token_is_refused_and_audited(
    tool_service: Any, upstream: FakeUpstream
) -> None:
    svc = await tool_service()
    c = Client(svc)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await c.stub.RegisterTool(
            tool_pb2.RegisterToolRequest(tool=_spec(upstream, "get_inventory")), metadata=c.meta(agent_id="sly-bot")
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    [entry] = await entries(svc, "auth.refused")
    assert (entry.subject, entry.action, entry.target, entry.outcome) == (
        "sly-bot",
        "auth.refused",
        REGISTER_TOOL,
        "PERMISSION_DENIED",
    )
    assert "admin" in entry.detail and "agent sly-bot" in entry.detail
    # Refused before anything was registered: no tool.register entry.
    assert await entries(svc, "tool.register", wait_s=0) == []


async def test_approving_and_denying_a_write_are_audited(tool_service: Any) -> None:
    svc = await tool_service()
    c = Client(svc)
    first = await c.execute("restart_service", {"service": "checkout"}, call_id="c1")
    second = await c.execute("restart_service", {"service": "payments"}, call_id="c2")
    assert first.WhichOneof("outcome") == "pending_approval" == second.WhichOneof("outcome")
    # The requesting agent may not decide its own approval: refused, and that is audited too.
    with pytest.raises(grpc.aio.AioRpcError) as own:
        await _resolve(c, first.pending_approval, True, roles=("operator",))
    assert own.value.code() == grpc.StatusCode.PERMISSION_DENIED
    await _resolve(c, first.pending_approval, True, **operator("ops-jane"))
    denied = await _resolve(c, second.pending_approval, False, **operator("ops-joe"))
    assert error_name(denied.result) == "APPROVAL_DENIED"
    found = await entries(svc, "approval.resolve", at_least=3)
    assert [(e.subject, e.target, e.outcome, e.detail) for e in found] == [
        ("agent-a", first.pending_approval.approval_id, "PERMISSION_DENIED", found[0].detail),
        ("ops-jane", first.pending_approval.approval_id, "ok", "approved (restart_service)"),
        ("ops-joe", second.pending_approval.approval_id, "ok", "denied (restart_service)"),
    ]
    assert "cannot approve" in found[0].detail


async def test_a_settlement_is_audited(tool_service: Any, upstream: FakeUpstream) -> None:
    upstream.slow_s = 1.5
    registry = [http_tool("short_write", upstream, "/slow", permission=WRITE, requires_approval=False, timeout_s=0.5)]
    svc = await tool_service({"tools": {"registry": registry}})
    c = Client(svc)
    unknown = await c.execute("short_write", {"q": "x"}, key="k-audit")
    assert error_name(unknown) == "OUTCOME_UNKNOWN"
    sid = unknown.error.metadata["settlement_id"]
    reply = await c.stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=sid,
            arguments_sha256=unknown.error.metadata["arguments_sha256"],
            settlement=common_pb2.SETTLEMENT_OUTCOME_RAN,
            reason="seen in the upstream's log",
        ),
        metadata=c.meta(**operator("ops-jane")),
        timeout=10,
    )
    assert reply.approval.settlement == common_pb2.SETTLEMENT_OUTCOME_RAN
    [entry] = await entries(svc, "settlement.resolve")
    assert (entry.subject, entry.action, entry.target, entry.outcome, entry.detail) == (
        "ops-jane",
        "settlement.resolve",
        sid,
        "ok",
        "ran (short_write)",
    )
    assert await entries(svc, "approval.resolve", wait_s=0) == []


async def test_agentmesh_audit_lists_what_tool_svc_recorded(tool_service: Any, upstream: FakeUpstream) -> None:
    from agentmesh.cli.audit_view import audit_command

    svc = await tool_service()
    c = Client(svc)
    await c.stub.RegisterTool(
        tool_pb2.RegisterToolRequest(tool=_spec(upstream, "get_inventory")), metadata=c.meta(**admin("root-ann"))
    )
    pending = (await c.execute("restart_service", {"service": "checkout"})).pending_approval
    await _resolve(c, pending, True, **operator("ops-jane"))
    with pytest.raises(grpc.aio.AioRpcError):
        await c.stub.RegisterTool(tool_pb2.RegisterToolRequest(tool=_spec(upstream, "x")), metadata=c.meta())
    await entries(svc, "auth.refused")
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(audit_command, svc.settings, since="5m", as_json=True, out=out, err=err)
    assert code == 0, err.getvalue()
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["subject"], r["action"], r["target"], r["outcome"]) for r in rows] == [
        ("root-ann", "tool.register", "get_inventory", "ok"),
        ("ops-jane", "approval.resolve", pending.approval_id, "ok"),
        ("agent-a", "auth.refused", REGISTER_TOOL, "PERMISSION_DENIED"),
    ]
    assert all(r["time"].endswith("Z") and r["time_ms"] > 0 for r in rows)
