"""Approvals that expire unresolved, through real gRPC: the sweeper asks tool_svc as the agent that
requested the approval, the task resumes with APPROVAL_EXPIRED, and a late ResolveApproval gets it
as a typed error (FAILED_PRECONDITION carrying reason APPROVAL_EXPIRED)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.rpc.status import from_rpc_error, to_detail
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc, tool_pb2
from tests.contract.dispatcher import conftest
from tests.contract.dispatcher.conftest import Ctx, MakeMesh, Mesh, answer, identity, tool_call

D = dispatcher_pb2
TTL_S = 0.3


@dataclass
class ExpiringToolService(conftest.FakeToolService):
    """The fake tool_svc with approvals that expire TTL_S after they are requested, as tool_svc's do."""

    expire_at: dict[str, float] = field(default_factory=dict)
    readers: list[str] = field(default_factory=list)

    async def ExecuteTool(self, request: tool_pb2.ExecuteToolRequest, context: Ctx) -> Any:
        reply = await super().ExecuteTool(request, context)
        if reply.result.WhichOneof("outcome") == "pending_approval":
            pending = reply.result.pending_approval
            self.expire_at[pending.approval_id] = time.time() + TTL_S
            expire = Timestamp()
            expire.FromMilliseconds(int(self.expire_at[pending.approval_id] * 1000))
            pending.expire_time.CopyFrom(expire)
            self.approvals[pending.approval_id] = (pending, *self.approvals[pending.approval_id][1:])
        return reply

    def _expire(self, approval_id: str) -> None:
        pending, state, requester = self.approvals[approval_id]
        if state == common_pb2.APPROVAL_STATE_PENDING and time.time() >= self.expire_at[approval_id]:
            self.approvals[approval_id] = (pending, common_pb2.APPROVAL_STATE_EXPIRED, requester)

    async def ResolveApproval(self, request: tool_pb2.ResolveApprovalRequest, context: Ctx) -> Any:
        if request.approval_id in self.approvals:
            self._expire(request.approval_id)
            pending, state, _ = self.approvals[request.approval_id]
            if state == common_pb2.APPROVAL_STATE_EXPIRED:
                await identity(context)
                d = to_detail(AgentmeshError(ErrorCode.APPROVAL_EXPIRED, f"approval {request.approval_id} expired"))
                result = common_pb2.ToolResult(tool_call_id=pending.plan.id, tool_name=pending.plan.name)
                result.error.CopyFrom(common_pb2.ErrorDetail(code=d.code, error_class=d.error_class, message=d.message))
                approval = common_pb2.Approval(request=pending, state=common_pb2.APPROVAL_STATE_EXPIRED)
                return tool_pb2.ResolveApprovalResponse(approval=approval, result=result)
        return await super().ResolveApproval(request, context)

    async def GetApproval(self, request: tool_pb2.GetApprovalRequest, context: Ctx) -> Any:
        caller = await identity(context)  # UNAUTHENTICATED without a token
        self.readers.append(caller.subject)
        self._expire(request.approval_id)
        return await super().GetApproval(request, context)


@pytest.fixture
def expiring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "FakeToolService", ExpiringToolService)


def policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    results = [m for m in messages if m.role == common_pb2.ROLE_TOOL]
    if not results:
        return tool_call("restart", {"service": "payment-svc"}, "c1")
    return answer(f"restart: {results[-1].content}")


def stub(mesh: Mesh) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


async def mesh_with(make_mesh: MakeMesh, sweep_interval_s: float) -> Mesh:
    return await make_mesh(
        policy,
        {"restart": lambda a: f"{a['service']} restarted"},
        needs_approval={"restart"},
        dispatcher={"approval_sweep_interval_s": sweep_interval_s},
    )


def assert_expired_and_went_on(events: list[D.TaskEvent], mesh: Mesh) -> None:
    resolved = [e for e in events if e.kind == D.TASK_EVENT_KIND_APPROVAL_RESOLVED]
    assert len(resolved) == 1
    assert resolved[0].attributes["state"] == "EXPIRED"
    assert resolved[0].error.code == common_pb2.ERROR_CODE_APPROVAL_EXPIRED
    fallback = [e for e in events if e.kind == D.TASK_EVENT_KIND_FALLBACK]
    assert [e.error.code for e in fallback] == [common_pb2.ERROR_CODE_APPROVAL_EXPIRED]
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED
    assert mesh.tools.runs["restart"] == 0


@pytest.mark.usefixtures("expiring")
async def test_an_expired_approval_is_swept_and_the_task_goes_on(make_mesh: MakeMesh) -> None:
    mesh = await mesh_with(make_mesh, 0.05)
    s = stub(mesh)
    start = D.StartTaskRequest(agent_id="ops", goal="restart payment-svc")
    call = s.RunTask(D.RunTaskRequest(start=start), metadata=mesh.md(), timeout=20)
    events = [reply.event async for reply in call if reply.event.sequence]
    assert any(e.kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED for e in events)
    assert_expired_and_went_on(events, mesh)
    # tool_svc was asked with the identity of the agent that requested the approval.
    assert isinstance(mesh.tools, ExpiringToolService) and mesh.tools.readers
    assert set(mesh.tools.readers) == {"ops"}
    pending = next(e for e in events if e.kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED).pending_approval
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await s.ResolveApproval(
            D.DispatcherServiceResolveApprovalRequest(
                task_id=events[0].task_id,
                approval_id=pending.approval_id,
                approve=True,
                arguments_sha256=pending.arguments_sha256,
            ),
            metadata=mesh.md(subject="bob"),  # alice started the task: another operator decides
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.usefixtures("expiring")
async def test_resolve_after_expiry_answers_approval_expired(make_mesh: MakeMesh) -> None:
    mesh = await mesh_with(make_mesh, 3600)  # no sweep: the late ResolveApproval meets the expiry
    s = stub(mesh)
    task = (await s.StartTask(D.StartTaskRequest(agent_id="ops", goal="restart"), metadata=mesh.md())).task
    deadline = time.monotonic() + 10
    while True:
        got = (await s.GetTask(D.GetTaskRequest(task_id=task.task_id), metadata=mesh.md())).task
        if got.status == D.TASK_STATUS_WAITING_APPROVAL:
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    pending = got.pending_approval
    while time.time() * 1000 <= pending.expire_time.ToMilliseconds():
        await asyncio.sleep(0.02)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await s.ResolveApproval(
            D.DispatcherServiceResolveApprovalRequest(
                task_id=task.task_id,
                approval_id=pending.approval_id,
                approve=True,
                arguments_sha256=pending.arguments_sha256,
            ),
            metadata=mesh.md(subject="bob"),  # alice started the task: another operator decides
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert from_rpc_error(caught.value).code == ErrorCode.APPROVAL_EXPIRED
    events = [
        r.event
        async for r in s.WatchTask(D.WatchTaskRequest(task_id=task.task_id), metadata=mesh.md(), timeout=20)
        if r.event.sequence
    ]
    assert_expired_and_went_on(events, mesh)
