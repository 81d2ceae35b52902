"""A short relay of handoffs (issue 44) across four service processes on one real Redis: three agents
on the scripted model's generic policy, each offered only its handoff tool, transfer the task along;
the real context_svc builds each hop summary (BuildHandoff) and grants the child's session its payloads.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
import yaml

from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.e2e.conftest import free_port
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Mesh, kill9

pytestmark = pytest.mark.e2e
D = dispatcher_pb2
ENDED = (D.TASK_STATUS_SUCCEEDED, D.TASK_STATUS_FAILED, D.TASK_STATUS_ABORTED, D.TASK_STATUS_CANCELLED)


def _overlay(tmp: Path) -> Path:
    def relay_agent(agent_id: str, *handoffs: str) -> dict[str, Any]:
        # A tool list naming no registry tool: the handoff is the only tool offered.
        return {"id": agent_id, "model": "scripted/relay", "tools": ["none_here"], "handoffs": list(handoffs)}

    config = {
        "providers": {"backends": [{"name": "scripted", "type": "scripted", "models": [{"name": "relay"}]}]},
        "agents": [
            relay_agent("relay_triage", "relay_logs"),
            relay_agent("relay_logs", "relay_report"),
            relay_agent("relay_report"),
        ],
    }
    path = tmp / "relay.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _task(stub: dispatcher_pb2_grpc.DispatcherServiceStub, mesh: Mesh, task_id: str) -> D.Task:
    reply: D.GetTaskResponse = await stub.GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh.operator_metadata())
    return reply.task


async def _settled(stub: dispatcher_pb2_grpc.DispatcherServiceStub, mesh: Mesh, task_id: str) -> D.Task:
    deadline = time.monotonic() + 60
    while True:
        task = await _task(stub, mesh, task_id)
        if task.status in (*ENDED, D.TASK_STATUS_HANDED_OFF):
            return task
        assert time.monotonic() < deadline, D.TaskStatus.Name(task.status)
        await asyncio.sleep(0.1)


async def test_a_relay_of_three_agents_across_processes(mesh_env: Mesh, tmp_path: Path) -> None:
    mesh_env.env["AGENTMESH_CONFIG"] = os.pathsep.join([mesh_env.env["AGENTMESH_CONFIG"], str(_overlay(tmp_path))])
    for name in SERVICE_ORDER:
        await asyncio.to_thread(mesh_env.start, name)
    async with grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        started = await stub.StartTask(
            D.StartTaskRequest(agent_id="relay_triage", goal="payment-svc restarts 2259 times: hand it over"),
            metadata=mesh_env.operator_metadata(),
        )
        root_id = started.task.task_id
        chain = [await _settled(stub, mesh_env, root_id)]
        while chain[-1].status == D.TASK_STATUS_HANDED_OFF:
            chain.append(await _settled(stub, mesh_env, chain[-1].child_task_id))
        assert [t.agent_id for t in chain] == ["relay_triage", "relay_logs", "relay_report"], [
            (t.agent_id, D.TaskStatus.Name(t.status), t.error.message) for t in chain
        ]
        assert chain[-1].status == D.TASK_STATUS_SUCCEEDED, chain[-1].error
        assert {t.root_task_id for t in chain} == {root_id}
        assert {t.created_by for t in chain} == {"alice"}
        listed = await stub.ListTasks(D.ListTasksRequest(root_task_id=root_id), metadata=mesh_env.operator_metadata())
        assert {t.task_id for t in listed.tasks} == {t.task_id for t in chain}
        # The hop summaries context_svc built are each child's goal, and each hop is in both streams.
        assert all(t.goal != chain[0].goal for t in chain[1:])
        for parent, child in itertools.pairwise(chain):
            for task_id in (parent.task_id, child.task_id):
                call = stub.WatchTask(
                    D.WatchTaskRequest(task_id=task_id), metadata=mesh_env.operator_metadata(), timeout=30
                )
                hops = [
                    r.event
                    async for r in call
                    if r.event.kind == D.TASK_EVENT_KIND_HANDOFF
                    and r.event.attributes["child_task_id"] == child.task_id
                ]
                assert len(hops) == 1 and int(hops[0].attributes["hop_tokens"]) > 0


@pytest.mark.parametrize("point", ["before_handoff_child", "after_handoff_child"])
async def test_kill9_of_the_parents_owner_mid_handoff_makes_one_child(
    mesh_env: Mesh, tmp_path: Path, point: str
) -> None:
    """The parent's dispatcher dies between the model's handoff call and the child's creation, or right after
    it: another replica resumes the step, and the relay has exactly one child, every event once."""
    mesh_env.env["AGENTMESH_CONFIG"] = os.pathsep.join([mesh_env.env["AGENTMESH_CONFIG"], str(_overlay(tmp_path))])
    mesh_env.env["AGENTMESH_DISPATCHER"] = json.dumps(
        {"claim_idle_s": 1.5, "claim_interval_s": 0.2, "heartbeat_interval_s": 0.5}
    )
    for name in ("context", "tool", "provider"):
        await asyncio.to_thread(mesh_env.start, name)
    pause = tmp_path / "pause"
    a = await asyncio.to_thread(
        mesh_env.start,
        "dispatcher",
        label="dispatcher-a",
        DISPATCHER_TEST_PAUSE_AT=point,
        DISPATCHER_TEST_PAUSE_FILE=str(pause),
    )
    async with grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        started = await stub.StartTask(
            D.StartTaskRequest(agent_id="relay_logs", goal="payment-svc restarts 2259 times: hand it over"),
            metadata=mesh_env.operator_metadata(),
        )
    root_id = started.task.task_id
    deadline = time.monotonic() + 30
    while not pause.exists() or not pause.read_text().strip():
        assert time.monotonic() < deadline, "the dispatcher never reached the pause point"
        await asyncio.sleep(0.05)
    reached, paused_task, _ = pause.read_text().split()
    assert (reached, paused_task) == (point, root_id)
    await asyncio.to_thread(kill9, a)

    port_b = free_port()
    await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-b", port=port_b)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port_b}") as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        root = await _settled(stub, mesh_env, root_id)
        assert root.status == D.TASK_STATUS_HANDED_OFF, root.error
        child = await _settled(stub, mesh_env, root.child_task_id)
        assert child.status == D.TASK_STATUS_SUCCEEDED and child.agent_id == "relay_report"
        listed = await stub.ListTasks(D.ListTasksRequest(root_task_id=root_id), metadata=mesh_env.operator_metadata())
        assert {t.task_id for t in listed.tasks} == {root_id, child.task_id}  # exactly one child
        call = stub.WatchTask(D.WatchTaskRequest(task_id=root_id), metadata=mesh_env.operator_metadata(), timeout=30)
        events = [r.event async for r in call if r.event.sequence]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.kind for e in events].count(D.TASK_EVENT_KIND_HANDOFF) == 1
    assert any("resumed on" in e.message for e in events if e.kind == D.TASK_EVENT_KIND_STATUS)
