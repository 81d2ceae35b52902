"""A side effect never runs twice (issue 18), with the services as processes and the effects counted at
the upstream: tool_svc killed mid-call, Redis killed and restarted mid-call, and the settlement of an
unknown outcome through `agentmesh settle`, both ways."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from agentmesh.cli.demo_ops import OpsApi
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc, tool_pb2, tool_pb2_grpc
from tests.e2e.conftest import BASE_CONFIG, DEMO_CONFIG, REPO
from tests.e2e.dispatcher.conftest import Mesh, kill9
from tests.e2e.dispatcher.test_crash_safety import NOTIFIER, start_task, watch_all

pytestmark = pytest.mark.e2e
D = dispatcher_pb2
NOTIFY = "/notify"


def notify_config(tmp: Path) -> Path:
    """The demo overlay with a 1 s timeout on `notify`, so a stalled upstream is an unknown outcome fast."""
    text = DEMO_CONFIG.read_text()
    line = "      endpoint_url: ${DEMO_OPS_API_URL:-http://127.0.0.1:18080}/notify\n"
    assert line in text
    path = tmp / "agentmesh.demo.yaml"
    path.write_text(text.replace(line, line + "      timeout_s: 1\n"))
    return path


def durable_redis(mesh: Mesh) -> LocalRedis:
    """A Redis that keeps every acknowledged write across kill -9 (what the README asks of production)."""
    redis = LocalRedis(extra_args=["--appendonly", "yes", "--appendfsync", "always"]).start()
    mesh.env["AGENTMESH_REDIS_URL"] = redis.url
    return redis


def configure(mesh: Mesh) -> None:
    mesh.env["AGENTMESH_CONFIG"] = os.pathsep.join([str(BASE_CONFIG), str(notify_config(mesh.tmp))])
    mesh.env["AGENTMESH_TOOLS_IDEMPOTENCY_LEASE_S"] = "1.0"
    mesh.env["AGENTMESH_TOOLS_IDEMPOTENCY_HEARTBEAT_S"] = "0.2"


async def execute(mesh: Mesh, key: str, nonce: str, timeout_s: float = 20) -> common_pb2.ToolResult:
    async with grpc.aio.insecure_channel(mesh.target("tool")) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)  # type: ignore[no-untyped-call]
        request = tool_pb2.ExecuteToolRequest(
            call=common_pb2.ToolCall(id="c1", name="notify", arguments_json=json.dumps({"seq": 1, "nonce": nonce})),
            session_id="sess-eo",
            idempotency_key=key,
        )
        metadata = mesh.agent_metadata("notifier", ["*:ops.notify:write"])
        reply = await stub.ExecuteTool(request, metadata=metadata, timeout=timeout_s)
        result: common_pb2.ToolResult = reply.result
        return result


async def until_received(ops_api: OpsApi, nonce: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(b.get("nonce") == nonce for b in ops_api.state.bodies(NOTIFY)):
        assert time.monotonic() < deadline, "the upstream never got the call"
        await asyncio.sleep(0.02)


def effects(ops_api: OpsApi, nonce: str) -> int:
    return sum(1 for b in ops_api.state.bodies(NOTIFY) if b.get("nonce") == nonce)


def unknown(result: common_pb2.ToolResult) -> str:
    assert result.WhichOneof("outcome") == "error", result
    assert result.error.code == common_pb2.ERROR_CODE_OUTCOME_UNKNOWN, result.error
    return str(result.error.metadata["settlement_id"])


async def test_tool_svc_killed_mid_call_is_never_re_sent(mesh_env: Mesh, ops_api: OpsApi) -> None:
    redis = durable_redis(mesh_env)
    try:
        configure(mesh_env)
        tool = await asyncio.to_thread(mesh_env.start, "tool")
        ops_api.state.stall(NOTIFY, 0.8, effect=True)
        nonce = "a1" * 8
        first = asyncio.create_task(execute(mesh_env, "task-k:1.0:c1", nonce))
        await until_received(ops_api, nonce)
        await asyncio.to_thread(kill9, tool)
        with pytest.raises(grpc.aio.AioRpcError):
            await first
        await asyncio.to_thread(mesh_env.start, "tool", label="tool-2")
        # The dead owner's heartbeat stops: within the 1 s lease the repeat learns the outcome is unknown.
        repeat = await execute(mesh_env, "task-k:1.0:c1", nonce)
        again = await execute(mesh_env, "task-k:1.0:c1", nonce)
        assert unknown(repeat) == unknown(again)
        await asyncio.sleep(1.0)
        assert effects(ops_api, nonce) == 1
    finally:
        redis.stop()


async def test_redis_restarted_mid_call_is_never_re_sent(mesh_env: Mesh, ops_api: OpsApi) -> None:
    redis = durable_redis(mesh_env)
    try:
        configure(mesh_env)
        await asyncio.to_thread(mesh_env.start, "tool")
        ops_api.state.stall(NOTIFY, 0.8, effect=True)
        nonce = "b2" * 8
        first = asyncio.create_task(execute(mesh_env, "task-r:1.0:c1", nonce))
        await until_received(ops_api, nonce)
        await asyncio.to_thread(redis.kill)
        # The call ends while Redis is down: its outcome cannot be recorded.
        try:
            lost = await first
            assert lost.WhichOneof("outcome") == "error", lost
        except grpc.aio.AioRpcError as exc:
            assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL), exc
        await asyncio.to_thread(redis.restart)
        deadline = time.monotonic() + 20
        while True:
            try:
                repeat = await execute(mesh_env, "task-r:1.0:c1", nonce, timeout_s=5)
                break
            except grpc.aio.AioRpcError as exc:  # the pool reconnecting, or "in progress" within the lease
                assert exc.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline, exc
                await asyncio.sleep(0.2)
        unknown(repeat)
        await asyncio.sleep(1.0)
        assert effects(ops_api, nonce) == 1
    finally:
        redis.stop()


def settle_cli(mesh: Mesh, task_id: str, flag: str) -> subprocess.CompletedProcess[str]:
    env = dict(mesh.env)
    services = json.loads(env["AGENTMESH_SERVICES"])
    env["AGENTMESH_SERVICES"] = json.dumps(services)
    return subprocess.run(
        [sys.executable, "-m", "agentmesh.cli", "settle", task_id, flag, "--reason", "read the upstream's log"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def wait_status(mesh: Mesh, task_id: str, status: int, timeout_s: float = 40) -> Any:
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        while True:
            task = (
                await stub.GetTask(D.GetTaskRequest(task_id=task_id), metadata=mesh.operator_metadata(), timeout=10)
            ).task
            if task.status == status:
                return task
            assert time.monotonic() < deadline, task
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("ran", [True, False], ids=["ran", "not-ran"])
async def test_an_unknown_outcome_waits_for_agentmesh_settle(mesh_env: Mesh, ops_api: OpsApi, ran: bool) -> None:
    """The first `notify` stalls past its 1 s timeout: with its effect (settled --ran, not re-sent) or
    lost (settled --not-ran, sent once more). Either way each step's effect happens exactly once."""
    configure(mesh_env)
    mesh_env.env["AGENTMESH_AGENTS"] = json.dumps([NOTIFIER])
    for name in ("context", "tool", "provider", "dispatcher"):
        await asyncio.to_thread(mesh_env.start, name)
    ops_api.state.stall(NOTIFY, 2.5, effect=ran)
    task_id = await start_task(mesh_env, mesh_env.target("dispatcher"))
    parked = await wait_status(mesh_env, task_id, D.TASK_STATUS_WAITING_APPROVAL)
    assert parked.pending_approval.kind == common_pb2.APPROVAL_KIND_SETTLEMENT
    assert json.loads(parked.pending_approval.plan.arguments_json)["seq"] == 1
    done = await asyncio.to_thread(settle_cli, mesh_env, task_id, "--ran" if ran else "--not-ran")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "settled " + ("RAN" if ran else "NOT_RAN") in done.stdout
    await wait_status(mesh_env, task_id, D.TASK_STATUS_SUCCEEDED)
    events = await watch_all(mesh_env, mesh_env.target("dispatcher"), task_id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert any(e.kind == D.TASK_EVENT_KIND_APPROVAL_RESOLVED and "settlement" in e.message for e in events)
    # Each step's side effect exactly once: the settled call was neither lost nor repeated.
    assert sorted(b["seq"] for b in ops_api.state.bodies(NOTIFY)) == [1, 2, 3]
    # Settling again is refused: the task no longer waits for it.
    again = await asyncio.to_thread(settle_cli, mesh_env, task_id, "--ran")
    assert again.returncode == 1 and "waits for no settlement" in again.stderr
