"""Who may do what through the real DispatcherService (issue 20): starting as an agent, the creator's
tasks, separation of duties, ListAgents, Task.created_by and the audit stream (fake downstream services)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from agentmesh.audit import AuditLog
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call

D = dispatcher_pb2


def stub(mesh: Mesh) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


def agent_md(mesh: Mesh, agent_id: str, *permissions: str) -> Any:
    return mesh.dispatcher.metadata(("agent",), subject=agent_id, agent_id=agent_id, permissions=list(permissions))


def restart_policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    results = [m for m in messages if m.role == common_pb2.ROLE_TOOL]
    if not results:
        return tool_call("restart", {"service": "payment-svc"}, "c1")
    return answer(f"done: {results[-1].content}")


async def denied(call: Any, missing: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, caught.value.details()
    assert from_rpc_error(caught.value).missing_permission == missing


async def waiting(mesh: Mesh, task_id: str) -> D.Task:
    for _ in range(500):
        task: D.Task = (await stub(mesh).GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh.md())).task
        if task.status == D.TASK_STATUS_WAITING_APPROVAL:
            return task
        await asyncio.sleep(0.02)
    raise AssertionError("the task never parked")


async def test_an_agent_token_cannot_start_another_agents_task_but_can_with_the_run_grant(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(lambda m, t: answer("ok"))
    s = stub(mesh)
    start = D.StartTaskRequest(agent_id="ops", goal="check payment-svc")
    billing = agent_md(mesh, "billing", "dev:*:write")
    await denied(s.StartTask(start, metadata=billing), "dev:agent.ops:run")

    async def run() -> None:
        async for _ in s.RunTask(D.RunTaskRequest(start=start), metadata=billing):
            pass

    await denied(run(), "dev:agent.ops:run")
    assert mesh.provider.calls == 0
    allowed = agent_md(mesh, "billing", "dev:agent.ops:run")
    events = [r.event async for r in s.RunTask(D.RunTaskRequest(start=start), metadata=allowed, timeout=20)]
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED
    task = (await s.GetTask(D.GetTaskRequest(task_id=events[0].task_id), metadata=allowed)).task
    assert task.created_by == "billing"


async def test_an_agent_token_cannot_watch_get_or_cancel_a_task_it_did_not_start(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    s = stub(mesh)
    task = (await s.StartTask(D.StartTaskRequest(agent_id="ops", goal="restart"), metadata=mesh.md())).task
    assert task.created_by == "alice"
    await waiting(mesh, task.task_id)
    for md in (agent_md(mesh, "ops", "dev:*:*"), agent_md(mesh, "billing", "dev:agent.ops:run")):
        await denied(s.GetTask(D.GetTaskRequest(task_id=task.task_id), metadata=md), "task:creator-or-operator")

        async def watch(md: Any = md) -> None:
            async for _ in s.WatchTask(D.WatchTaskRequest(task_id=task.task_id), metadata=md, timeout=10):
                pass

        await denied(watch(), "task:creator-or-operator")
        await denied(s.CancelTask(D.CancelTaskRequest(task_id=task.task_id), metadata=md), "task:creator-or-operator")
    got = (await s.GetTask(D.GetTaskRequest(task_id=task.task_id), metadata=mesh.md(subject="carol"))).task
    assert got.status == D.TASK_STATUS_WAITING_APPROVAL and got.created_by == "alice"
    cancelled = (await s.CancelTask(D.CancelTaskRequest(task_id=task.task_id), metadata=mesh.md())).task
    assert cancelled.status == D.TASK_STATUS_CANCELLED


async def test_the_creator_cannot_approve_its_own_tasks_write(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(restart_policy, {"restart": lambda a: "restarted"}, needs_approval={"restart"})
    s = stub(mesh)
    task = (await s.StartTask(D.StartTaskRequest(agent_id="ops", goal="restart"), metadata=mesh.md())).task
    pending = (await waiting(mesh, task.task_id)).pending_approval
    request = D.DispatcherServiceResolveApprovalRequest(
        task_id=task.task_id,
        approval_id=pending.approval_id,
        approve=True,
        reason="mine",
        arguments_sha256=pending.arguments_sha256,
    )
    await denied(s.ResolveApproval(request, metadata=mesh.md()), "approver:not-task-creator")
    assert mesh.tools.resolvers == [] and mesh.tools.runs["restart"] == 0  # tool_svc was never asked
    reply = await s.ResolveApproval(request, metadata=mesh.md(subject="bob"))
    assert reply.approval.resolved_by == "bob"
    events = [
        r.event
        async for r in s.WatchTask(D.WatchTaskRequest(task_id=task.task_id), metadata=mesh.md(), timeout=20)
        if r.event.sequence
    ]
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED and mesh.tools.runs["restart"] == 1

    store = mesh.dispatcher.host.store
    assert store is not None
    entries = await AuditLog(store, mesh.dispatcher.settings.audit).read()
    assert [(e.subject, e.action, e.target, e.outcome, e.detail) for e in entries] == [
        ("alice", "task.start", task.task_id, "ok", "agent ops"),
        ("alice", "approval.resolve", pending.approval_id, "PERMISSION_DENIED", "approver:not-task-creator"),
    ]  # bob's decision: audited by tool_svc (a fake here), not a second time by the dispatcher


async def test_list_agents_hides_agents_the_caller_cannot_run(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(lambda m, t: answer("ok"))
    s = stub(mesh)

    async def listed(md: Any) -> list[str]:
        return [a.agent_id for a in (await s.ListAgents(D.ListAgentsRequest(), metadata=md)).agents]

    assert await listed(mesh.md()) == ["ops"]
    assert await listed(agent_md(mesh, "billing", "dev:*:write")) == []
    assert await listed(agent_md(mesh, "billing", "dev:agent.ops:run")) == ["ops"]
