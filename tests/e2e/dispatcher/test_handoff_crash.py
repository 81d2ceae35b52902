"""kill -9 of a relay's dispatcher while a child runs (issue 44's crash safety), in both modes: the four-agent
relay of test_relay_acceptance, the dispatcher paused (testhooks) in the second agent's task, while its
parent is HANDED_OFF (transfer) or parked WAITING_CHILD (ask), then killed; another replica takes the
child over. The relay completes with exactly one child per hop and every task's events once, in order.
(The kill of the first agent's owner between its handoff call and the child's creation, and right after
it, is test_handoff_relay's.)
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import grpc.aio
import pytest

from agentmesh.cli.demo_relay import PLANTED, write_log
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.e2e.conftest import free_port
from tests.e2e.dispatcher.conftest import Mesh, kill9
from tests.e2e.dispatcher.test_relay_acceptance import ROLES, _events, chain_from, overlay, relay

pytestmark = pytest.mark.e2e
D = dispatcher_pb2


@pytest.mark.parametrize(
    ("mode", "point"),
    [
        ("transfer", "after_reply_checkpoint"),  # the child's own handoff call checkpointed, nothing sent
        ("ask", "after_reply_checkpoint"),
        ("ask", "before_handoff_child"),  # the child's hop built, the grandchild not created yet
    ],
)
async def test_kill9_while_the_child_runs_the_relay_completes_once(
    mesh_env: Mesh, tmp_path: Path, mode: str, point: str
) -> None:
    mesh_env.env["AGENTMESH_CONFIG"] = os.pathsep.join([mesh_env.env["AGENTMESH_CONFIG"], str(overlay(tmp_path))])
    mesh_env.env["AGENTMESH_DISPATCHER"] = json.dumps(
        {"claim_idle_s": 1.5, "claim_interval_s": 0.2, "heartbeat_interval_s": 0.5}
    )
    write_log(tmp_path / "logs")
    for name in ("context", "tool", "provider"):
        await asyncio.to_thread(mesh_env.start, name)
    pause = tmp_path / "pause"
    a = await asyncio.to_thread(
        mesh_env.start,
        "dispatcher",
        label="dispatcher-a",
        DISPATCHER_TEST_PAUSE_AT=point,
        DISPATCHER_TEST_PAUSE_FILE=str(pause),
        DISPATCHER_TEST_PAUSE_AGENT=f"{mode}_logs",
    )
    async with grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        running = asyncio.create_task(relay(stub, mesh_env, mode))  # polls; dies with dispatcher-a
        deadline = time.monotonic() + 30
        while not pause.exists() or not pause.read_text().strip():
            assert time.monotonic() < deadline, "the dispatcher never reached the pause point"
            await asyncio.sleep(0.05)
        reached, paused_task, _ = pause.read_text().split()
        assert reached == point
        root_reply = await stub.ListTasks(D.ListTasksRequest(), metadata=mesh_env.operator_metadata())
        waiting = {t.agent_id: t.status for t in root_reply.tasks}
        parked = D.TASK_STATUS_WAITING_CHILD if mode == "ask" else D.TASK_STATUS_HANDED_OFF
        assert waiting[f"{mode}_triage"] == parked, waiting
        await asyncio.to_thread(kill9, a)
        running.cancel()

    port_b = free_port()
    await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-b", port=port_b)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port_b}") as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        root_id = next(t.task_id for t in root_reply.tasks if t.agent_id == f"{mode}_triage")
        chain = await chain_from(stub, mesh_env, root_id)
        described = [(t.agent_id, D.TaskStatus.Name(t.status), t.error.message) for t in chain]
        assert [t.agent_id for t in chain] == [f"{mode}_{r}" for r in ROLES], described
        assert chain[-1].status == D.TASK_STATUS_SUCCEEDED and chain[0].status in (
            D.TASK_STATUS_SUCCEEDED,
            D.TASK_STATUS_HANDED_OFF,
        ), described
        listed = await stub.ListTasks(D.ListTasksRequest(root_task_id=root_id), metadata=mesh_env.operator_metadata())
        assert sorted(t.task_id for t in listed.tasks) == sorted(t.task_id for t in chain)  # one child a hop
        for task in chain:
            events = await _events(stub, mesh_env, task.task_id)
            # Every event once, in order, across the two owners.
            assert [e.sequence for e in events] == list(range(1, len(events) + 1)), task.agent_id
            hops = [e.attributes for e in events if e.kind == D.TASK_EVENT_KIND_HANDOFF]
            sent = [h for h in hops if h["parent_task_id"] == task.task_id and h["mode"] == mode]
            assert len(sent) == (0 if task is chain[-1] else 1), (task.agent_id, hops)
            if mode == "ask" and task is not chain[-1]:
                assert [h["mode"] for h in hops].count("answer") == 1, (task.agent_id, hops)
            if task.task_id == paused_task:
                assert any("resumed on" in e.message for e in events if e.kind == D.TASK_EVENT_KIND_STATUS)
        assert paused_task == chain[1].task_id
        assert all(value in chain[-1].goal for value in PLANTED.values())
