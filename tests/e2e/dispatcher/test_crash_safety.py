"""Crash safety: kill -9 a dispatcher mid-step; a second replica claims the task and completes it.

The model (provider_svc/scenarios/nonce_chain.py) answers differently on every call: each reply asks
`notify` with the next sequence number and a fresh random nonce, so a replica that regenerated a
checkpointed reply instead of resuming it would send a different call, and the fake upstream (the
ops API) would see it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import grpc.aio
import pytest

from agentmesh.cli.demo_ops import OpsApi
from agentmesh.config import DispatcherSettings, RedisSettings
from agentmesh.store import Store
from agentmesh.v1 import context_pb2, context_pb2_grpc, dispatcher_pb2, dispatcher_pb2_grpc
from dispatcher_svc.tasks import StaleOwnerError, TaskStore
from tests.e2e.conftest import free_port
from tests.e2e.dispatcher.conftest import Mesh, kill9

pytestmark = pytest.mark.e2e
D = dispatcher_pb2
NOTIFIER = {
    "id": "notifier",
    "model": "scripted/nonce-chain",
    "tools": ["notify"],
    "permissions": ["*:ops.notify:write"],
    "max_steps": 8,
}
STEPS = 3


def prepare(mesh: Mesh) -> None:
    mesh.env["AGENTMESH_AGENTS"] = json.dumps([NOTIFIER])
    mesh.env["AGENTMESH_DISPATCHER"] = json.dumps(
        {"claim_idle_s": 1.5, "claim_interval_s": 0.2, "heartbeat_interval_s": 0.5}
    )
    for name in ("context", "tool", "provider"):
        mesh.start(name)


def _read(path: Path) -> str:
    return str(path.read_text()) if path.exists() else ""


async def wait_file(path: Path, timeout_s: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while not (text := await asyncio.to_thread(_read, path)).strip():
        assert time.monotonic() < deadline, "the dispatcher never reached the pause point"
        await asyncio.sleep(0.05)
    return text.split()


async def watch_all(mesh: Mesh, target: str, task_id: str) -> list[D.TaskEvent]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        call = stub.WatchTask(D.WatchTaskRequest(task_id=task_id), metadata=mesh.operator_metadata(), timeout=60)
        return [r.event async for r in call if r.event.sequence]


async def start_task(mesh: Mesh, target: str) -> str:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        request = D.StartTaskRequest(agent_id="notifier", goal="announce the three maintenance steps")
        reply = await stub.StartTask(request, metadata=mesh.operator_metadata(), timeout=10)
        return str(reply.task.task_id)


async def session_count(mesh: Mesh, task_id: str) -> int:
    async with grpc.aio.insecure_channel(mesh.target("context")) as channel:
        stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
        metadata = mesh.agent_metadata("notifier", ["*:ops.notify:write"], task_id=task_id)
        reply = await stub.GetSession(context_pb2.GetSessionRequest(session_id=task_id), metadata=metadata, timeout=10)
        return int(reply.session.message_count)


async def settled_session_count(mesh: Mesh, task_id: str, expected: int) -> int:
    """The session's message count once it reaches `expected` (or 15 s pass): the answer is appended
    after the SUCCEEDED commit (dispatcher_svc/run/exits.py), so a watch can end just before it lands.
    A count past `expected` (a duplicate) is returned at once."""
    deadline = time.monotonic() + 15
    while (count := await session_count(mesh, task_id)) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return count


def check_outcome(events: list[D.TaskEvent], ops_api: OpsApi) -> None:
    # Every event once, in order (no loss, no duplicate across the two owners).
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED, [e.message for e in events]
    assert any("resumed on" in e.message for e in events if e.kind == D.TASK_EVENT_KIND_STATUS)
    issued = [json.loads(e.tool_call.arguments_json) for e in events if e.kind == D.TASK_EVENT_KIND_TOOL_CALL]
    assert [c["seq"] for c in issued] == list(range(1, STEPS + 1))
    # Every side effect ran exactly once, and it is the checkpointed call (same random nonce).
    seen = ops_api.state.bodies("/notify")
    assert sorted(b["seq"] for b in seen) == list(range(1, STEPS + 1)), seen
    assert {b["nonce"] for b in seen} == {c["nonce"] for c in issued}


@pytest.mark.parametrize("point", ["after_reply_checkpoint", "after_tool_call", "after_append_result"])
async def test_kill9_mid_step_then_another_replica_finishes(mesh_env: Mesh, ops_api: OpsApi, point: str) -> None:
    await asyncio.to_thread(prepare, mesh_env)
    pause = mesh_env.tmp / "pause"
    a = await asyncio.to_thread(
        mesh_env.start,
        "dispatcher",
        label="dispatcher-a",
        DISPATCHER_TEST_PAUSE_AT=point,
        DISPATCHER_TEST_PAUSE_FILE=str(pause),
    )
    task_id = await start_task(mesh_env, mesh_env.target("dispatcher"))
    reached, paused_task, fence = await wait_file(pause)
    assert (reached, paused_task) == (point, task_id)
    before = len(ops_api.state.bodies("/notify"))
    assert before == (0 if point == "after_reply_checkpoint" else 1)
    await asyncio.to_thread(kill9, a)

    port_b = free_port()
    await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-b", port=port_b)
    events = await watch_all(mesh_env, f"127.0.0.1:{port_b}", task_id)
    check_outcome(events, ops_api)
    # The session log holds each message once: goal, then (reply + result) per step, then the answer.
    assert await settled_session_count(mesh_env, task_id, 1 + 2 * STEPS + 1) == 1 + 2 * STEPS + 1

    # A stale owner's late checkpoint is refused by the fence.
    store = await Store.connect(RedisSettings(url=mesh_env.env["AGENTMESH_REDIS_URL"]), "dev")
    try:
        tasks = TaskStore(store, DispatcherSettings())
        with pytest.raises(StaleOwnerError):
            await tasks.commit(task_id, fence=int(fence), fields={"answer": "from the dead"})
        assert (await tasks.load(task_id)).answer.startswith("notify done 3 times")
    finally:
        await store.close()


async def test_a_frozen_owner_that_thaws_is_refused(mesh_env: Mesh, ops_api: OpsApi) -> None:
    """SIGSTOP the owner after its tool call; another replica finishes; SIGCONT: the thawed owner's
    lease check refuses it before it writes anything, and its stale run stops."""
    await asyncio.to_thread(prepare, mesh_env)
    pause = mesh_env.tmp / "pause"
    a = await asyncio.to_thread(
        mesh_env.start,
        "dispatcher",
        label="dispatcher-a",
        DISPATCHER_TEST_PAUSE_AT="after_tool_call",
        DISPATCHER_TEST_PAUSE_FILE=str(pause),
    )
    task_id = await start_task(mesh_env, mesh_env.target("dispatcher"))
    await wait_file(pause)
    os.kill(a.pid, signal.SIGSTOP)
    try:
        port_b = free_port()
        await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-b", port=port_b)
        events = await watch_all(mesh_env, f"127.0.0.1:{port_b}", task_id)
        check_outcome(events, ops_api)
        count = await settled_session_count(mesh_env, task_id, 1 + 2 * STEPS + 1)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    await asyncio.to_thread(pause.unlink)  # the hook lets the thawed owner go on
    deadline = time.monotonic() + 20
    refused = ("is stale", "fence moved")  # the run's own lease check or its renewer, whichever runs first
    while not any(text in mesh_env.log("dispatcher-a") for text in refused):
        assert time.monotonic() < deadline, mesh_env.log("dispatcher-a")[-3000:]
        await asyncio.sleep(0.1)
    assert await session_count(mesh_env, task_id) == count == 1 + 2 * STEPS + 1
    assert len(ops_api.state.bodies("/notify")) == STEPS
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port_b}") as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        task = (await stub.GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh_env.operator_metadata())).task
    assert task.status == D.TASK_STATUS_SUCCEEDED and task.last_sequence == events[-1].sequence
