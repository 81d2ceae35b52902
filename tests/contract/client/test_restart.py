"""A task parked on an approval outlives a restart of the dispatcher: the Python client's stream (sync,
and an AsyncClient watching the same task) resumes on the new process, the approval is resolved with
`resolve_approval` by a second operator, and both see every event exactly once up to SUCCEEDED."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentmesh.authenticator import Authenticator
from agentmesh.rpc.host import ServiceHost
from agentmesh.store import Store
from agentmesh.telemetry import setup_telemetry
from agentmesh_client import ApprovalRequired, AsyncClient, Client, Event, TaskStatus
from agentmesh_client.errors import PermissionDenied
from dispatcher_svc.server import SPEC as DISPATCHER_SPEC
from tests.contract.client.conftest import target, token
from tests.contract.stack import AGENT, Stack

# The calculator as a write that waits for a human: the task parks on WAITING_APPROVAL.
GATED = {
    "tools": {"registry": [{"name": "calculator", "executor": "builtin", "timeout_s": 60, "requires_approval": True}]}
}


async def restart_dispatcher(stack: Stack) -> None:
    """Stops the dispatcher (its streams break) and starts a new one on the same port."""
    old, cleanup = stack.hosts["dispatcher"]
    port = old.port
    await old.stop(grace=0, drain_delay=0)
    if cleanup is not None:
        await cleanup()
    assert old.store is not None
    await old.store.close()
    await old.telemetry.aclose()
    services = {
        name: {"host": "127.0.0.1", "port": stack.hosts[name][0].port} for name in ("provider", "tool", "context")
    }
    settings = stack.settings(services)
    host = ServiceHost(
        name=DISPATCHER_SPEC.name,
        settings=settings,
        telemetry=setup_telemetry("dispatcher_svc", settings),
        authenticator=Authenticator(settings.auth, settings.environment),
        method_roles=DISPATCHER_SPEC.method_roles,
        store=await Store.connect(settings.redis, settings.environment),
    )
    stack.hosts["dispatcher"] = (host, await DISPATCHER_SPEC.setup(host))
    await host.start(f"127.0.0.1:{port}")


@pytest.fixture
async def gated(redis_url: str, tmp_path: Path) -> Any:
    async with Stack(redis_url, tmp_path, GATED) as running:
        yield running


async def test_a_parked_task_survives_a_dispatcher_restart_and_finishes_after_approval(gated: Stack) -> None:
    loop = asyncio.get_running_loop()
    parked = asyncio.Event()
    seen: list[Event] = []

    def follow() -> Any:
        with Client(target(gated), token=token(gated), timeout=20, backoff=(0.05, 0.5)) as client:
            run = client.run(AGENT, "compute 7*6")
            for event in run:
                seen.append(event)
                if isinstance(event, ApprovalRequired):
                    loop.call_soon_threadsafe(parked.set)
            return run

    runner = asyncio.create_task(asyncio.to_thread(follow))
    await asyncio.wait_for(parked.wait(), 60)
    approval = next(e for e in seen if isinstance(e, ApprovalRequired))
    assert approval.tool == "calculator" and approval.status is TaskStatus.WAITING_APPROVAL
    async with AsyncClient(target(gated), token=token(gated), timeout=20) as watcher:
        watched = watcher.watch(approval.task_id)
        first = await anext(aiter(watched))  # a second stream, open across the restart

        await restart_dispatcher(gated)

        async with AsyncClient(target(gated), token=token(gated), timeout=20) as creator:
            with pytest.raises(PermissionDenied):  # separation of duties: not the task's creator
                await creator.resolve_approval(
                    approval.task_id, approval.approval_id, approve=True, arguments_sha256=approval.arguments_sha256
                )
        async with AsyncClient(target(gated), token=token(gated, "approver"), timeout=20) as approver:
            task = await approver.resolve_approval(
                approval.task_id,
                approval.approval_id,
                approve=True,
                arguments_sha256=approval.arguments_sha256,
                reason="checked",
            )
        assert task.task_id == approval.task_id
        run = await asyncio.wait_for(runner, 60)
        rest = [event async for event in watched]

    sequences = [e.sequence for e in seen]
    assert sequences == list(range(1, len(seen) + 1))
    assert run.status is TaskStatus.SUCCEEDED and "42" in run.answer and run.reconnects >= 1
    assert [first, *rest] == seen and watched.reconnects >= 1
