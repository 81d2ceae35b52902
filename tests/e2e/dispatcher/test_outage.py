"""Tasks ride out a restart of context_svc without a client's help (issue 49), with the services as
processes and the side effects counted at the upstream (the ops API's /notify).

context_svc is killed with -9 right after a task's first `notify` ran (the dispatcher's test hook
holds the run there), so the run meets the outage at its next call (the result's append):
- back within the outage budget: the run waits (its events say so) and the task SUCCEEDS, never
  resumed, each notify sent once;
- kept down past a small budget: the task FAILS UNAVAILABLE naming context_svc and how long it was
  down; resumed once context_svc is back, it SUCCEEDS, each notify still sent once.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import grpc.aio
import pytest

from agentmesh.cli.demo_ops import OpsApi
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.e2e.dispatcher.conftest import Mesh, kill9
from tests.e2e.dispatcher.test_crash_safety import STEPS, prepare, start_task, wait_file, watch_all
from tests.e2e.dispatcher.test_exactly_once import wait_status

pytestmark = pytest.mark.e2e
D = dispatcher_pb2


async def held_after_first_call(mesh: Mesh, outage: dict[str, float]) -> tuple[str, Path]:
    """The mesh with a dispatcher that holds its first task after its first tool call; the task id
    and the file whose removal lets it go on."""
    await asyncio.to_thread(prepare, mesh)
    mesh.env["AGENTMESH_DISPATCHER"] = json.dumps(
        {"claim_idle_s": 1.5, "claim_interval_s": 0.2, "heartbeat_interval_s": 0.5, **outage}
    )
    pause = mesh.tmp / "pause"
    await asyncio.to_thread(
        mesh.start, "dispatcher", DISPATCHER_TEST_PAUSE_AT="after_tool_call", DISPATCHER_TEST_PAUSE_FILE=str(pause)
    )
    task_id = await start_task(mesh, mesh.target("dispatcher"))
    reached, paused_task, _ = await wait_file(pause)
    assert (reached, paused_task) == ("after_tool_call", task_id)
    return task_id, pause


def effects_once(events: list[D.TaskEvent], ops_api: OpsApi) -> None:
    """Each planned notify reached the upstream exactly once, and it is the call the task recorded."""
    issued = [json.loads(e.tool_call.arguments_json) for e in events if e.kind == D.TASK_EVENT_KIND_TOOL_CALL]
    seen = ops_api.state.bodies("/notify")
    assert sorted(b["seq"] for b in seen) == list(range(1, STEPS + 1)), seen
    assert {b["nonce"] for b in seen} == {c["nonce"] for c in issued}


def outage_waits(events: list[D.TaskEvent]) -> list[D.TaskEvent]:
    return [e for e in events if e.kind == D.TASK_EVENT_KIND_STATUS and "retrying in" in e.message]


async def test_context_svc_restarted_mid_task_the_task_succeeds_without_a_resume(
    mesh_env: Mesh, ops_api: OpsApi
) -> None:
    task_id, pause = await held_after_first_call(
        mesh_env, {"service_retry_backoff_s": 0.1, "outage_max_backoff_s": 0.5}
    )
    await asyncio.to_thread(kill9, mesh_env.processes["context"])
    pause.unlink()  # the run goes on, and meets context_svc down
    await asyncio.sleep(3.0)
    await asyncio.to_thread(mesh_env.start, "context", label="context-2")

    events = await watch_all(mesh_env, mesh_env.target("dispatcher"), task_id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED, [e.message for e in events]
    waits = outage_waits(events)
    assert waits, [e.message for e in events]
    assert all(e.message.startswith("context_svc unavailable, retrying in") for e in waits), [e.message for e in waits]
    assert {e.status for e in waits} == {D.TASK_STATUS_RUNNING}
    assert [e.status for e in events].count(D.TASK_STATUS_FAILED) == 0  # never failed, never resumed
    effects_once(events, ops_api)


async def test_context_svc_down_past_the_budget_fails_typed_then_a_resume_finishes(
    mesh_env: Mesh, ops_api: OpsApi
) -> None:
    # One quiet retry, not three: retries against a killed process may take long enough (the channel's
    # reconnect) that three quiet ones spend the whole 2 s budget, and the run then fails without the
    # reported wait the resume below checks for (seen once in make test).
    outage = {
        "service_retry_backoff_s": 0.1,
        "outage_max_backoff_s": 0.5,
        "outage_budget_s": 2.0,
        "service_retry_attempts": 1,
    }
    task_id, pause = await held_after_first_call(mesh_env, outage)
    await asyncio.to_thread(kill9, mesh_env.processes["context"])
    pause.unlink()

    failed = await wait_status(mesh_env, task_id, D.TASK_STATUS_FAILED, timeout_s=30)
    error = failed.error
    assert error.code == common_pb2.ERROR_CODE_UNAVAILABLE and error.retryable, error
    assert error.metadata["service"] == "context_svc" and error.metadata["reason"] == "outage_budget", error
    assert float(error.metadata["down_s"]) >= 1.0, error
    assert "context_svc was unavailable for" in error.message and "outage budget of 2 s" in error.message
    assert len(ops_api.state.bodies("/notify")) == 1

    await asyncio.to_thread(mesh_env.start, "context", label="context-2")
    async with grpc.aio.insecure_channel(mesh_env.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        request = D.StartTaskRequest(agent_id="notifier", goal="announce the three maintenance steps", task_id=task_id)
        deadline = time.monotonic() + 30
        while True:  # as a client would: the dispatcher may not have reconnected to context_svc yet
            try:
                await stub.StartTask(request, metadata=mesh_env.operator_metadata(), timeout=10)
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline, exc
                await asyncio.sleep(0.5)
    events = await watch_all(mesh_env, mesh_env.target("dispatcher"), task_id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED, [e.message for e in events]
    assert outage_waits(events)
    effects_once(events, ops_api)
