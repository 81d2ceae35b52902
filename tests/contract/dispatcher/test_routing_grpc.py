"""Capability routing through the real DispatcherService (issue 44): StartTask naming a capability, its
bad inputs, and the agents' depth counters as tasks park, succeed, fail and are cancelled."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.store import Keys, Store
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc, provider_pb2
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call

D = dispatcher_pb2
KEYS = Keys()
INVALID = (grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.INVALID_REQUEST)


def agent(agent_id: str, *capabilities: str, model: str = "fake/m") -> dict[str, Any]:
    return {"id": agent_id, "model": model, "capabilities": list(capabilities), "permissions": ["dev:test:*"]}


TEAM = [agent("log-b", "logs"), agent("log-a", "logs", "triage"), agent("reporter", "report")]


def stub(mesh: Mesh) -> dispatcher_pb2_grpc.DispatcherServiceStub:
    return dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


def park_policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    """Asks for the approval-gated `restart` (the task parks, unfinished); answers once it ran."""
    if any(m.role == common_pb2.ROLE_TOOL and m.content == "restarted" for m in messages):
        return answer("done")
    if any(m.role == common_pb2.ROLE_USER and "fail" in m.content for m in messages):
        return tool_call("noop", {}, "n1")  # never answers: out of steps
    return tool_call("restart", {}, "r1")


async def start(mesh: Mesh, goal: str = "look at the logs", **fields: Any) -> D.Task:
    reply: D.StartTaskResponse = await stub(mesh).StartTask(D.StartTaskRequest(goal=goal, **fields), metadata=mesh.md())
    return reply.task


async def wait_status(mesh: Mesh, task_id: str, *statuses: int) -> D.Task:
    for _ in range(200):
        reply: D.GetTaskResponse = await stub(mesh).GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh.md())
        task = reply.task
        if task.status in statuses:
            return task
        await asyncio.sleep(0.05)
    raise AssertionError(f"task {task_id} never reached {statuses}: {D.TaskStatus.Name(task.status)}")


# Through the test's Store: a plain client cannot reach the cluster of `make test-cluster`.
async def depths(store: Store, *agents: str) -> dict[str, int]:
    return {a: int(await store.redis.zcard(KEYS.agent_active(a))) for a in agents}


async def outcomes(store: Store, agent_id: str) -> tuple[int, int]:
    counts: dict[Any, Any] = await store.redis.hgetall(KEYS.agent_outcomes(agent_id))
    ended = sum(int(v) for k, v in counts.items() if k.endswith(b":e"))
    return ended, sum(int(v) for k, v in counts.items() if k.endswith(b":f"))


async def test_start_by_capability_picks_the_least_loaded_carrier_and_records_it(
    make_mesh: MakeMesh, store: Store
) -> None:
    mesh = await make_mesh(
        park_policy, {"restart": lambda a: "restarted", "noop": lambda a: "ok"}, needs_approval={"restart"}, agents=TEAM
    )
    first = await start(mesh, capability="logs")
    assert first.agent_id == "log-a"  # both idle: the smaller id
    await wait_status(mesh, first.task_id, D.TASK_STATUS_WAITING_APPROVAL)
    second = await start(mesh, capability="logs")
    assert second.agent_id == "log-b"  # log-a holds a parked task
    await wait_status(mesh, second.task_id, D.TASK_STATUS_WAITING_APPROVAL)
    assert await depths(store, "log-a", "log-b", "reporter") == {"log-a": 1, "log-b": 1, "reporter": 0}
    third = await start(mesh, capability="triage")
    assert third.agent_id == "log-a"  # the only carrier, whatever its depth
    # The choice is visible: the task's first event names the capability, and the run is the agent's.
    events = stub(mesh).WatchTask(D.WatchTaskRequest(task_id=first.task_id), metadata=mesh.md(), timeout=5)
    created = None
    async for reply in events:
        if reply.event.sequence == 1:
            created = reply.event
            break
    assert created is not None
    assert created.attributes["capability"] == "logs" and created.attributes["agent_id"] == "log-a"
    assert created.attributes["routed_depth"] == "0" and created.attributes["routed_healthy"] == "2"
    assert created.attributes["routed_models"] == "checked"
    assert "routed by capability logs" in created.message
    assert any(seen.startswith("log-a/log-a/") for seen in mesh.provider.agents)
    # A retry of the start with its task id keeps the routed agent, though log-b is now less loaded.
    again = await start(mesh, capability="triage", task_id=third.task_id)
    assert (again.task_id, again.agent_id) == (third.task_id, "log-a")
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # an existing task of an agent not carrying it
        await start(mesh, capability="report", task_id=third.task_id)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize(
    ("fields", "status", "code", "field"),
    [
        ({"agent_id": "log-a", "capability": "logs"}, *INVALID, "capability"),
        ({}, *INVALID, "agent_id"),
        ({"capability": "Logs!"}, *INVALID, "capability"),
        ({"capability": "billing"}, grpc.StatusCode.NOT_FOUND, ErrorCode.NOT_FOUND, "capability"),
    ],
)  # fmt: skip
async def test_bad_capability_starts_are_typed(
    make_mesh: MakeMesh, fields: dict[str, str], status: grpc.StatusCode, code: ErrorCode, field: str
) -> None:
    mesh = await make_mesh(park_policy, agents=TEAM)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await start(mesh, **fields)
    assert caught.value.code() == status
    err = from_rpc_error(caught.value)
    assert err.code == code
    assert any(v.path == field for v in err.violations), err.violations
    if code == ErrorCode.NOT_FOUND:
        assert err.metadata["capability"] == "billing" and err.metadata["reason"] == "CAPABILITY_UNKNOWN"
        assert "billing" in err.message and "known: logs, report, triage" in err.message


async def test_carriers_all_unhealthy_is_unavailable_naming_the_capability(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(park_policy, agents=[*TEAM, agent("rep-2", "report", model="fake/down")])
    mesh.provider.models = [
        provider_pb2.ModelInfo(name="fake/m", unavailable=True, unavailable_reason="FAKE_KEY is unset"),
        provider_pb2.ModelInfo(name="fake/down", unavailable=True, unavailable_reason="down"),
    ]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await start(mesh, capability="report")
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    err = from_rpc_error(caught.value)
    assert err.metadata["capability"] == "report" and err.metadata["reason"] == "NO_HEALTHY_AGENT"
    assert "rep-2: model fake/down unavailable: down" in err.message
    assert "reporter: model fake/m unavailable: FAKE_KEY is unset" in err.message


async def test_the_depth_falls_back_as_tasks_succeed_fail_and_are_cancelled(make_mesh: MakeMesh, store: Store) -> None:
    mesh = await make_mesh(
        park_policy, {"restart": lambda a: "restarted", "noop": lambda a: "ok"}, needs_approval={"restart"}, agents=TEAM
    )
    parked = [await start(mesh, capability="logs") for _ in range(4)]
    assert sorted(t.agent_id for t in parked) == ["log-a", "log-a", "log-b", "log-b"]  # alternating by depth
    for task in parked:
        await wait_status(mesh, task.task_id, D.TASK_STATUS_WAITING_APPROVAL)
    assert await depths(store, "log-a", "log-b") == {"log-a": 2, "log-b": 2}
    # Cancelled: a parked one and one still pending.
    await stub(mesh).CancelTask(D.CancelTaskRequest(task_id=parked[0].task_id, reason="no"), metadata=mesh.md())
    # Succeeded: approved by another operator, it runs to its answer.
    pending = (await stub(mesh).GetTask(D.GetTaskRequest(task_id=parked[1].task_id), metadata=mesh.md())).task
    await stub(mesh).ResolveApproval(
        D.DispatcherServiceResolveApprovalRequest(
            task_id=pending.task_id,
            approval_id=pending.pending_approval.approval_id,
            approve=True,
            reason="ok",
            arguments_sha256=pending.pending_approval.arguments_sha256,
        ),
        metadata=mesh.md(subject="bob"),
    )
    await wait_status(mesh, parked[1].task_id, D.TASK_STATUS_SUCCEEDED)
    # Aborted: out of steps (terminal, not a FAILED).
    aborted = await start(mesh, "fail please", agent_id="reporter", max_steps=1)
    await wait_status(mesh, aborted.task_id, D.TASK_STATUS_ABORTED)
    # Failed: its provider is down.
    mesh.provider.down_for.add("reporter")
    failing = await start(mesh, "look again", agent_id="reporter")
    await wait_status(mesh, failing.task_id, D.TASK_STATUS_FAILED)
    left = {a: 2 - sum(1 for t in parked[:2] if t.agent_id == a) for a in ("log-a", "log-b")}
    assert await depths(store, "log-a", "log-b", "reporter") == {**left, "reporter": 0}
    assert await outcomes(store, "reporter") == (2, 1)
    log_a, log_b = await outcomes(store, "log-a"), await outcomes(store, "log-b")
    assert (log_a[0] + log_b[0], log_a[1] + log_b[1]) == (2, 0)  # one cancelled, one succeeded: no FAILED
    # A repeated cancel of an ended task moves nothing.
    with contextlib.suppress(grpc.aio.AioRpcError):
        await stub(mesh).CancelTask(D.CancelTaskRequest(task_id=parked[0].task_id, reason="again"), metadata=mesh.md())
    assert await depths(store, "log-a", "log-b", "reporter") == {**left, "reporter": 0}
    # Resumed after FAILED: unfinished again (and counted once more when it fails again).
    await start(mesh, "look again", agent_id="reporter", task_id=failing.task_id)
    await wait_status(mesh, failing.task_id, D.TASK_STATUS_FAILED)
    assert await depths(store, "reporter") == {"reporter": 0}
    assert await outcomes(store, "reporter") == (3, 2)


async def test_the_sweep_drops_a_finished_task_a_crash_left_in_a_set(make_mesh: MakeMesh, store: Store) -> None:
    mesh = await make_mesh(
        park_policy,
        {"restart": lambda a: "restarted"},
        needs_approval={"restart"},
        agents=TEAM,
        dispatcher={"approval_sweep_interval_s": 0.1, "routing": {"repair_interval_s": 0.1}},
    )
    live = await start(mesh, capability="triage")
    await wait_status(mesh, live.task_id, D.TASK_STATUS_WAITING_APPROVAL)
    client = store.redis
    # A task that ended, and one that never existed, left behind a minute ago (a crash between the
    # task's last commit and its removal from the set).
    await client.hset(KEYS.task("t-ended"), mapping={"status": D.TASK_STATUS_SUCCEEDED, "agent_id": "log-a"})
    await client.zadd(KEYS.agent_active("log-a"), {"t-ended": 1, "t-never": 1})
    for _ in range(100):
        if await depths(store, "log-a") == {"log-a": 1}:
            break
        await asyncio.sleep(0.05)
    raw: list[bytes] = await client.zrange(KEYS.agent_active("log-a"), 0, -1)  # type: ignore[assignment]
    assert {m.decode() for m in raw} == {live.task_id}
    assert (await start(mesh, capability="logs")).agent_id == "log-b"  # log-a: depth 1 again, not 3


async def test_routing_chooses_among_the_carriers_the_caller_may_run(make_mesh: MakeMesh) -> None:
    mesh = await make_mesh(park_policy, {"noop": lambda a: "ok"}, agents=TEAM)
    carol = mesh.dispatcher.metadata(("agent",), subject="carol", permissions=("dev:agent.log-b:run",))
    reply: D.StartTaskResponse = await stub(mesh).StartTask(
        D.StartTaskRequest(capability="logs", goal="look"), metadata=carol
    )
    assert reply.task.agent_id == "log-b"  # log-a has the smaller id, but carol may not run it
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # she may run no carrier of triage
        await stub(mesh).StartTask(D.StartTaskRequest(capability="triage", goal="look"), metadata=carol)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "log-a" in (caught.value.details() or "")
