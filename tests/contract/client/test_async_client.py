"""agentmesh_client.aio.AsyncClient against the four services, on the test's own event loop: a task to
SUCCEEDED, a cut stream resumed with no gap or repeat, typed errors, and cancelling a task."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentmesh_client import Answer, AsyncClient, StatusChanged, TaskStatus
from agentmesh_client.errors import NotFound, PermissionDenied, Unauthenticated
from tests.contract.client.conftest import target, token
from tests.contract.stack import AGENT, Stack
from tests.e2e.deploy.netcut import CuttingProxy


async def test_a_task_runs_and_a_cut_stream_resumes_with_no_gap_or_repeat(stack: Stack) -> None:
    proxy = CuttingProxy(target(stack)).__enter__()
    try:
        async with AsyncClient(proxy.target, token=token(stack), timeout=20) as client:
            run = client.run(AGENT, "compute 4*5")
            events = [event async for event in run]
            task = await run.result()
    finally:
        await asyncio.to_thread(proxy.__exit__, None, None, None)
    async with AsyncClient(target(stack), token=token(stack), timeout=20) as direct:
        replayed = [event async for event in direct.watch(run.task_id)]
        tail = [event.sequence async for event in direct.watch(run.task_id, after_sequence=len(events) - 2)]

    assert proxy.cuts == 1 and run.reconnects >= 1
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events == replayed
    assert tail == [len(events) - 1, len(events)]
    assert isinstance(events[-1], StatusChanged) and events[-1].status is TaskStatus.SUCCEEDED
    assert any(isinstance(e, Answer) and "20" in e.text for e in events)
    assert (task.status, task.answer, task.request_id) == (TaskStatus.SUCCEEDED, run.answer, run.request_id)


async def test_typed_errors_and_cancel(stack: Stack) -> None:
    async with AsyncClient(target(stack), token=token(stack), timeout=20) as client:
        with pytest.raises(NotFound) as caught:
            await client.run("no-such-agent", "hello", request_id="async-rid").result()
        # A task that is over cannot be cancelled; someone else's task is not yours to read.
        done = await client.run(AGENT, "compute 1+2").result()
        with pytest.raises(Exception) as late:
            await client.cancel(done.task_id, "too late")
    async with AsyncClient(target(stack), token=token(stack, "someone-else", ("agent",)), timeout=20) as other:
        with pytest.raises(PermissionDenied) as denied:
            await other.get_task(done.task_id)
    async with AsyncClient(target(stack), timeout=20) as anonymous:
        with pytest.raises(Unauthenticated):
            await anonymous.list_agents()

    assert caught.value.code == grpc.StatusCode.NOT_FOUND and caught.value.request_id == "async-rid"
    assert caught.value.detail is not None and caught.value.reason == "NOT_FOUND"
    assert late.value.__class__.__name__ == "FailedPrecondition", late.value
    assert denied.value.detail is not None and denied.value.reason == "PERMISSION_DENIED"
