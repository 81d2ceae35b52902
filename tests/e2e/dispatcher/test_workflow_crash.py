"""Workflow runs survive their dispatcher (issue 46): kill -9 the dispatcher advancing a run once its first
node has finished; a second replica takes the run over after its lease and finishes it, and no finished node
runs again (every node one attempt, one task; the scripted model's side effects counted at the ops API)."""

from __future__ import annotations

import asyncio
import json
import time

import grpc.aio
import pytest

from agentmesh.cli.demo_ops import OpsApi
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc, workflow_pb2, workflow_pb2_grpc
from tests.e2e.conftest import free_port
from tests.e2e.dispatcher.conftest import Mesh, kill9
from tests.e2e.dispatcher.test_crash_safety import NOTIFIER, STEPS

pytestmark = pytest.mark.e2e
W = workflow_pb2
CHAIN = {
    "name": "chain",
    "nodes": [
        {"id": "first", "type": "agent", "agent": "notifier", "goal": "announce the first maintenance steps"},
        {"id": "second", "type": "agent", "agent": "notifier", "goal": "announce the next steps", "after": ["first"]},
        {"id": "third", "type": "agent", "agent": "notifier", "goal": "announce the last steps", "after": ["second"]},
    ],
}


def prepare(mesh: Mesh) -> None:
    mesh.env["AGENTMESH_AGENTS"] = json.dumps([NOTIFIER])
    mesh.env["AGENTMESH_DISPATCHER"] = json.dumps(
        {"claim_idle_s": 1.5, "claim_interval_s": 0.2, "heartbeat_interval_s": 0.5}
    )
    mesh.env["AGENTMESH_WORKFLOWS"] = json.dumps({"definitions": [CHAIN], "poll_interval_s": 0.2, "lease_s": 2})
    for name in ("context", "tool", "provider"):
        mesh.start(name)


def nodes(run: W.WorkflowRun) -> dict[str, W.WorkflowNode]:
    return {n.node_id: n for n in run.nodes}


async def test_kill9_of_the_owner_mid_run_resumes_on_another_replica(mesh_env: Mesh, ops_api: OpsApi) -> None:
    await asyncio.to_thread(prepare, mesh_env)
    a = await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-a")
    md = mesh_env.operator_metadata()
    async with grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = workflow_pb2_grpc.WorkflowServiceStub(channel)  # type: ignore[no-untyped-call]
        await stub.StartWorkflowRun(W.StartWorkflowRunRequest(workflow="chain", run_id="k-1"), metadata=md, timeout=10)
        deadline = time.monotonic() + 60
        while True:
            run = (await stub.GetWorkflowRun(W.GetWorkflowRunRequest(run_id="k-1"), metadata=md, timeout=10)).run
            if nodes(run)["first"].status == W.WORKFLOW_NODE_STATUS_SUCCEEDED:
                break
            assert time.monotonic() < deadline, run
            await asyncio.sleep(0.05)
    await asyncio.to_thread(kill9, a)

    port_b = free_port()
    await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-b", port=port_b)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port_b}") as channel:
        stub = workflow_pb2_grpc.WorkflowServiceStub(channel)  # type: ignore[no-untyped-call]
        watch = stub.WatchWorkflowRun(W.WatchWorkflowRunRequest(run_id="k-1"), metadata=md, timeout=90)
        events = [r.event async for r in watch]
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        assert events[-1].run_status == W.WORKFLOW_RUN_STATUS_SUCCEEDED, events
        run = (await stub.GetWorkflowRun(W.GetWorkflowRunRequest(run_id="k-1"), metadata=md, timeout=10)).run
        assert {n.node_id: n.attempts for n in run.nodes} == {"first": 1, "second": 1, "third": 1}
        # Each node's one task ran its steps once: STEPS notifications per node, no more.
        tasks = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        for node in run.nodes:
            task = (await tasks.GetTask(dispatcher_pb2.GetTaskRequest(task_id=node.task_id), metadata=md)).task
            assert task.status == dispatcher_pb2.TASK_STATUS_SUCCEEDED
    seen = ops_api.state.bodies("/notify")
    assert sorted(b["seq"] for b in seen) == sorted(list(range(1, STEPS + 1)) * 3), seen


async def test_two_dispatchers_fire_a_schedule_tick_once(mesh_env: Mesh, ops_api: OpsApi) -> None:
    """Both replicas fire every due tick; the tick's derived run id makes it one run, and the run's fence one
    task per node."""
    tick = {**CHAIN, "name": "tick", "nodes": CHAIN["nodes"][:1], "schedule": {"cron": "* * * * *"}}
    await asyncio.to_thread(prepare, mesh_env)
    mesh_env.env["AGENTMESH_WORKFLOWS"] = json.dumps({"definitions": [tick], "poll_interval_s": 0.1, "lease_s": 2})
    await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-a")
    port_b = free_port()
    await asyncio.to_thread(mesh_env.start, "dispatcher", label="dispatcher-b", port=port_b)
    md = mesh_env.operator_metadata()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port_b}") as channel:
        stub = workflow_pb2_grpc.WorkflowServiceStub(channel)  # type: ignore[no-untyped-call]
        deadline = time.monotonic() + 30
        while not (runs := (await stub.ListWorkflowRuns(W.ListWorkflowRunsRequest(), metadata=md)).runs):
            assert time.monotonic() < deadline, "no scheduled run"
            await asyncio.sleep(0.1)
        run_id = runs[-1].run_id
        watch = stub.WatchWorkflowRun(W.WatchWorkflowRunRequest(run_id=run_id), metadata=md, timeout=60)
        assert [r.event async for r in watch][-1].run_status == W.WORKFLOW_RUN_STATUS_SUCCEEDED
        # Tasks first, then runs: a run exists before its task, so every task's run is in the later list (a
        # minute that turns meanwhile fires one more tick: one more run, never a second run of one tick).
        tasks = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        listed = await tasks.ListTasks(dispatcher_pb2.ListTasksRequest(agent_id="notifier"), metadata=md)
        task_ids = [t.task_id for t in listed.tasks]
        runs = (await stub.ListWorkflowRuns(W.ListWorkflowRunsRequest(), metadata=md)).runs
        ticks = [r.run_id for r in runs]
        assert len(ticks) == len(set(ticks)) and all(t.startswith("tick.schedule.") for t in ticks)
        assert len(task_ids) == len(set(task_ids)) and set(task_ids) <= {f"wf.{t}.first.-.1" for t in ticks}
        assert f"wf.{run_id}.first.-.1" in task_ids
