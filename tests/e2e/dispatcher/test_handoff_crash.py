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

from agentmesh.cli.demo_relay import GOAL, PLANTED, write_log
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


@pytest.mark.parametrize("point", ["after_handoff_child", "after_reply_checkpoint"])
async def test_kill9_mid_verification_asks_each_verifier_once(mesh_env: Mesh, tmp_path: Path, point: str) -> None:
    """The producer's dispatcher dies once its transfer call is checkpointed (its verifier's task not created
    yet), or right after creating that task (the producer not yet WAITING_CHILD): one verifier task per
    round, the rejection counted once (the second round's acceptance lets the transfer go on), the relay
    completes with every event once."""
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
        DISPATCHER_TEST_PAUSE_AGENT="verified_logs",
    )
    async with grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        started = await stub.StartTask(
            D.StartTaskRequest(agent_id="verified_triage", goal=GOAL), metadata=mesh_env.operator_metadata()
        )
        root_id = started.task.task_id
        deadline = time.monotonic() + 30
        while not pause.exists() or not pause.read_text().strip():
            assert time.monotonic() < deadline, "the dispatcher never reached the pause point"
            await asyncio.sleep(0.05)
    await asyncio.to_thread(kill9, a)
    _, paused_task, _ = pause.read_text().split()

    port_b = free_port()
    await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-b", port=port_b)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port_b}") as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        chain = await chain_from(stub, mesh_env, root_id)
        described = [(t.agent_id, D.TaskStatus.Name(t.status), t.error.message) for t in chain]
        assert [t.agent_id for t in chain] == [f"verified_{r}" for r in ROLES], described
        assert chain[-1].status == D.TASK_STATUS_SUCCEEDED, described
        assert paused_task == chain[1].task_id
        listed = await stub.ListTasks(D.ListTasksRequest(root_task_id=root_id), metadata=mesh_env.operator_metadata())
        checks = [t for t in listed.tasks if t.agent_id == "checker"]
        verdicts = sorted(json.loads(t.output_json)["verdict"] for t in checks)
        assert verdicts == ["accepted", "rejected"], verdicts  # one verifier task a round
        assert len(listed.tasks) == len(chain) + 2
        for task in chain:
            events = await _events(stub, mesh_env, task.task_id)
            assert [e.sequence for e in events] == list(range(1, len(events) + 1)), task.agent_id
        events = await _events(stub, mesh_env, chain[1].task_id)
        kinds = [(e.kind, e.attributes.get("mode", "")) for e in events if e.kind == D.TASK_EVENT_KIND_HANDOFF]
        assert kinds.count((D.TASK_EVENT_KIND_HANDOFF, "verify")) == 2, kinds
        assert kinds.count((D.TASK_EVENT_KIND_HANDOFF, "answer")) == 2, kinds
        assert kinds.count((D.TASK_EVENT_KIND_HANDOFF, "transfer")) == 2, kinds  # the one it came by, the one it sent
        assert [e.kind for e in events if "VERIFICATION_REJECTED" in e.message].count(D.TASK_EVENT_KIND_CORRECTION) == 1
        assert any("resumed on" in e.message for e in events if e.kind == D.TASK_EVENT_KIND_STATUS)
