"""DispatcherService through real gRPC, with fake tool/context/provider servers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import grpc.aio
import pytest
import redis.asyncio

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.rpc.status import from_rpc_error, rich_details
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call
from tests.rediscluster import cluster_mode

D = dispatcher_pb2


def stub(mesh: Mesh) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


def tool_messages(messages: list[common_pb2.Message]) -> list[common_pb2.Message]:
    return [m for m in messages if m.role == common_pb2.ROLE_TOOL]


def calc_policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    results = tool_messages(messages)
    if not results:
        return tool_call("calc", {"a": 20, "b": 22}, "c1")
    return answer(f"the answer is {results[-1].content}")


async def run(mesh: Mesh, goal: str = "add numbers", **start: Any) -> list[D.TaskEvent]:
    call = stub(mesh).RunTask(
        D.RunTaskRequest(start=D.StartTaskRequest(agent_id=start.pop("agent_id", "ops"), goal=goal, **start)),
        metadata=mesh.md(),
        timeout=20,
    )
    return [reply.event async for reply in call if reply.event.sequence]


async def test_run_task_streams_every_event_to_the_answer(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(calc_policy, {"calc": lambda a: str(a["a"] + a["b"])})
    events = await run(mesh)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    kinds = [D.TaskEventKind.Name(e.kind).removeprefix("TASK_EVENT_KIND_") for e in events]
    assert kinds == [
        "STATUS", "STATUS", "STEP_STARTED", "CONTEXT", "MODEL_REPLY", "TOOL_CALL", "TOOL_RESULT",
        "STEP_STARTED", "CONTEXT", "MODEL_REPLY", "ANSWER", "STATUS",
    ]  # fmt: skip
    result = next(e for e in events if e.kind == D.TASK_EVENT_KIND_TOOL_RESULT)
    assert result.tool_result.WhichOneof("outcome") == "output"
    assert result.tool_result.output.inline == "42"
    assert result.tool_call.name == "calc" and json.loads(result.tool_call.arguments_json) == {"a": 20, "b": 22}
    context = next(e for e in events if e.kind == D.TASK_EVENT_KIND_CONTEXT)
    assert int(context.attributes["context_tokens"]) > 0 and "raw_tokens" in context.attributes
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED
    task = (await stub(mesh).GetTask(D.GetTaskRequest(task_id=events[0].task_id), metadata=mesh.md())).task
    assert task.status == D.TASK_STATUS_SUCCEEDED
    assert task.answer == "the answer is 42"
    assert task.last_sequence == len(events)
    assert task.usage.total_tokens == 220
    assert task.request_id
    # Downstream calls carried the task's token (agent, task, permissions) and its request id.
    caller = mesh.tools.callers[0]
    assert (caller.agent_id, caller.task_id, caller.permissions) == ("ops", task.task_id, ("dev:test:read",))
    assert set(mesh.context.request_ids) == {task.request_id}
    assert mesh.provider.agents[0] == "ops/ops/fake/m"


async def test_run_task_of_a_task_run_here_reads_none_of_its_events_back(
    make_mesh: MakeMesh, redis_url: str, request: pytest.FixtureRequest
) -> None:
    # Issue 45: the created event is streamed as written and the run's commits come from this process's
    # feed, subscribed before the create: no read of the task's event stream (Redis MONITOR sees every
    # command); every event, in order.
    if cluster_mode(request.config):
        pytest.skip("monitors one standalone server")
    mesh = await make_mesh(calc_policy, {"calc": lambda a: str(a["a"] + a["b"])})
    seen: list[str] = []
    client = redis.asyncio.Redis.from_url(redis_url)
    async with client.monitor() as monitor:

        async def listen() -> None:
            while True:
                seen.append(str((await monitor.next_command())["command"]))

        listener = asyncio.create_task(listen())
        await asyncio.sleep(0.1)
        events = await run(mesh)
        await asyncio.sleep(0.1)
        listener.cancel()
    await client.aclose()
    stream = f":{{{events[0].task_id}}}:events"
    assert [c for c in seen if stream in c and c.split()[0].upper() in ("XRANGE", "XREAD", "XREVRANGE")] == []
    assert any(stream in c and c.startswith("XADD") for c in seen)  # (the monitor saw the task's commands)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[1].message.startswith("status RUNNING on ")
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED and len(events) == 12


async def test_missing_or_forged_identity_is_refused(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(calc_policy)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub(mesh).ListAgents(D.ListAgentsRequest())
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub(mesh).ListAgents(D.ListAgentsRequest(), metadata=(("x-agentmesh-identity", "forged.token"),))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    agents = (await stub(mesh).ListAgents(D.ListAgentsRequest(), metadata=mesh.md())).agents
    assert [(a.agent_id, a.model) for a in agents] == [("ops", "fake/m")]


@pytest.mark.parametrize(
    ("request_", "status", "code", "field"),
    [
        (D.StartTaskRequest(agent_id="ghost", goal="x"), grpc.StatusCode.NOT_FOUND, ErrorCode.NOT_FOUND, "agent_id"),
        (
            D.StartTaskRequest(agent_id="ops", goal=""),
            grpc.StatusCode.INVALID_ARGUMENT,
            ErrorCode.INVALID_REQUEST,
            "goal",
        ),
        (
            D.StartTaskRequest(agent_id="ops", goal="x", token_budget=-5),
            grpc.StatusCode.INVALID_ARGUMENT,
            ErrorCode.INVALID_REQUEST,
            "token_budget",
        ),
        (
            D.StartTaskRequest(agent_id="ops", goal="x", token_budget=0),
            grpc.StatusCode.INVALID_ARGUMENT,
            ErrorCode.INVALID_REQUEST,
            "token_budget",
        ),
        (
            D.StartTaskRequest(agent_id="ops", goal="x", max_steps=0),
            grpc.StatusCode.INVALID_ARGUMENT,
            ErrorCode.INVALID_REQUEST,
            "max_steps",
        ),
    ],
)
async def test_bad_start_requests_are_typed(
    make_mesh: MakeMesh, request_: D.StartTaskRequest, status: grpc.StatusCode, code: ErrorCode, field: str
) -> None:
    mesh = await make_mesh(calc_policy)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub(mesh).StartTask(request_, metadata=mesh.md())
    assert caught.value.code() == status
    err = from_rpc_error(caught.value)
    assert err.code == code and err.violations[0].path == field
    rich = rich_details(caught.value)
    assert rich.error_info is not None and rich.error_info.reason == code.name
    assert rich.bad_request is not None and rich.bad_request.field_violations[0].field == field
    # The streaming variant fails the same way.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub(mesh).RunTask(D.RunTaskRequest(start=request_), metadata=mesh.md()):
            pass
    assert caught.value.code() == status


async def test_unknown_task_id_is_not_found(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(calc_policy)
    s = stub(mesh)
    for call in (
        s.GetTask(D.GetTaskRequest(task_id="nope"), metadata=mesh.md()),
        s.CancelTask(D.CancelTaskRequest(task_id="nope"), metadata=mesh.md()),
        s.ResolveApproval(
            D.DispatcherServiceResolveApprovalRequest(task_id="nope", approval_id="a", arguments_sha256="0" * 64),
            metadata=mesh.md(),
        ),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert from_rpc_error(caught.value).violations[0].path == "task_id"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in s.WatchTask(D.WatchTaskRequest(task_id="nope"), metadata=mesh.md()):
            pass
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_approval_through_the_dispatcher_with_heartbeats(make_mesh: MakeMesh) -> None:
    def policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        results = tool_messages(messages)
        if not results:
            return tool_call("restart", {"service": "payment-svc"}, "c1")
        return answer(f"restart result: {results[-1].content}")

    mesh = await make_mesh(policy, {"restart": lambda a: f"{a['service']} restarted"}, needs_approval={"restart"})
    s = stub(mesh)
    start = D.StartTaskRequest(agent_id="ops", goal="restart payment-svc")
    stream = s.RunTask(D.RunTaskRequest(start=start), metadata=mesh.md(), timeout=20)
    seen: list[D.TaskEvent] = []
    heartbeats = 0
    resolved = False
    async for reply in stream:
        event = reply.event
        if event.kind == D.TASK_EVENT_KIND_HEARTBEAT:
            assert event.sequence == 0
            heartbeats += 1
            if heartbeats == 2 and not resolved:
                pending = next(e for e in seen if e.kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED).pending_approval
                # An agent token may not resolve approvals.
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await s.ResolveApproval(
                        D.DispatcherServiceResolveApprovalRequest(
                            task_id=event.task_id, approval_id=pending.approval_id, approve=True
                        ),
                        metadata=mesh.md(("agent",), subject="ops"),
                    )
                assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
                reply_ = await s.ResolveApproval(
                    D.DispatcherServiceResolveApprovalRequest(
                        task_id=event.task_id,
                        approval_id=pending.approval_id,
                        approve=True,
                        reason="maintenance window",
                        arguments_sha256=pending.arguments_sha256,
                    ),
                    metadata=mesh.md(subject="bob"),  # alice started the task: a second operator approves
                )
                assert reply_.approval.state == 2  # APPROVED
                assert reply_.approval.resolved_by == "bob"
                # Resumed: queued again, and a worker may already have picked it up.
                assert reply_.task.status in (D.TASK_STATUS_PENDING, D.TASK_STATUS_RUNNING, D.TASK_STATUS_SUCCEEDED)
                resolved = True
            continue
        seen.append(event)
    kinds = [e.kind for e in seen]
    assert D.TASK_EVENT_KIND_APPROVAL_REQUIRED in kinds and D.TASK_EVENT_KIND_APPROVAL_RESOLVED in kinds
    waiting = next(e for e in seen if e.kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED)
    assert waiting.status == D.TASK_STATUS_WAITING_APPROVAL
    assert waiting.pending_approval.impact == "restart: brief outage"
    assert json.loads(waiting.pending_approval.plan.arguments_json) == {"service": "payment-svc"}
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].status == D.TASK_STATUS_SUCCEEDED
    # The approval reached tool_svc with the operator's own identity, not the agent's.
    assert [r.subject for r in mesh.tools.resolvers] == ["bob"]
    assert mesh.tools.runs["restart"] == 1


async def test_watch_reconnects_after_a_sequence(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(calc_policy, {"calc": lambda a: str(a["a"] + a["b"])})
    s = stub(mesh)
    task = (await s.StartTask(D.StartTaskRequest(agent_id="ops", goal="add"), metadata=mesh.md())).task
    first: list[int] = []
    call = s.WatchTask(D.WatchTaskRequest(task_id=task.task_id), metadata=mesh.md(), timeout=20)
    async for reply in call:
        if reply.event.sequence:
            first.append(reply.event.sequence)
        if len(first) == 3:
            call.cancel()
            break
    rest = [
        r.event.sequence
        async for r in s.WatchTask(
            D.WatchTaskRequest(task_id=task.task_id, after_sequence=first[-1]), metadata=mesh.md(), timeout=20
        )
        if r.event.sequence
    ]
    assert first + rest == list(range(1, len(first) + len(rest) + 1))
    final = (await s.GetTask(D.GetTaskRequest(task_id=task.task_id), metadata=mesh.md())).task
    assert final.last_sequence == rest[-1] and final.status == D.TASK_STATUS_SUCCEEDED


async def test_cancel_through_grpc(make_mesh: MakeMesh) -> None:
    def slow(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        return tool_call("wait", {"n": len(tool_messages(messages))}, f"c{len(messages)}")

    mesh = await make_mesh(slow, {"wait": lambda a: "waited"})
    s = stub(mesh)
    task = (await s.StartTask(D.StartTaskRequest(agent_id="ops", goal="wait"), metadata=mesh.md())).task
    cancelled = (await s.CancelTask(D.CancelTaskRequest(task_id=task.task_id, reason="stop"), metadata=mesh.md())).task
    assert cancelled.status == D.TASK_STATUS_CANCELLED
    assert cancelled.error.code == common_pb2.ERROR_CODE_CANCELLED
    events = [
        r.event async for r in s.WatchTask(D.WatchTaskRequest(task_id=task.task_id), metadata=mesh.md(), timeout=10)
    ]
    assert events[-1].status == D.TASK_STATUS_CANCELLED
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await s.CancelTask(D.CancelTaskRequest(task_id=task.task_id), metadata=mesh.md())
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_unavailable_provider_fails_the_task_typed(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(calc_policy, dispatcher={"service_retry_attempts": 2})
    await mesh.servers["provider"].stop(None)
    events = await run(mesh)
    assert events[-1].status == D.TASK_STATUS_FAILED
    assert events[-1].error.code == common_pb2.ERROR_CODE_UNAVAILABLE
    assert events[-1].error.error_class == common_pb2.ERROR_CLASS_ENGINEERING


async def test_contract_error_round_trip_over_grpc(make_mesh: MakeMesh) -> None:
    def lookup(args: dict[str, Any]) -> str | AgentmeshError:
        if not str(args["id"]).startswith("ORD-"):
            return AgentmeshError(
                ErrorCode.SCHEMA_INVALID, "bad id", violations=[Violation("$.id", "pattern", "^ORD-", "", "e.g. ORD-1")]
            )
        return "found"

    def policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
        results = tool_messages(messages)
        if not results:
            return tool_call("lookup", {"id": "x"}, "c1")
        if "hint: e.g. ORD-1" in results[-1].content:
            return tool_call("lookup", {"id": "ORD-1"}, "c2")
        return answer(results[-1].content)

    mesh = await make_mesh(policy, {"lookup": lookup})
    events = await run(mesh)
    correction = next(e for e in events if e.kind == D.TASK_EVENT_KIND_CORRECTION)
    assert correction.error.code == common_pb2.ERROR_CODE_SCHEMA_INVALID
    assert correction.error.error_class == common_pb2.ERROR_CLASS_CONTRACT
    assert correction.error.violations[0].hint == "e.g. ORD-1"
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED
    assert mesh.tools.runs["lookup"] == 2


async def test_many_tasks_concurrently(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(calc_policy, {"calc": lambda a: str(a["a"] + a["b"])})
    results = await asyncio.gather(*(run(mesh, f"add {i}") for i in range(16)))
    assert all(r[-1].status == D.TASK_STATUS_SUCCEEDED for r in results)
    assert mesh.tools.runs["calc"] == 16
